"""A throwaway MIT Kerberos realm for tests: a KDC on a free loopback port,
its database, config and keytabs all in one temp directory.

Nothing machine-global is read or written: the KDC and the tools get
KRB5_CONFIG / KRB5_KDC_PROFILE pointing into the directory, and Java gets
-Djava.security.krb5.conf. Debian packages: krb5-kdc, krb5-admin-server
(kdb5_util, kadmin.local), krb5-user (kinit, klist)."""

import os
import shutil
import subprocess
from pathlib import Path

from zkharness import HOST, free_port, port_accepts, tail, wait_or_kill, wait_until

REALM = "ZKW.TEST"
SBIN = ["/usr/sbin", "/usr/bin"]


def tool(name):
    for d in SBIN:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return shutil.which(name)


def available():
    return all(tool(t) for t in ("krb5kdc", "kdb5_util", "kadmin.local", "kinit"))


class Realm:
    def __init__(self, workdir):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.krb5_conf = self.dir / "krb5.conf"
        self.kdc_conf = self.dir / "kdc.conf"
        self.log = self.dir / "kdc.log"
        self.proc = None
        # No DNS anywhere: principals are named exactly as asked for.
        self.krb5_conf.write_text(
            "[libdefaults]\n default_realm = %s\n dns_lookup_kdc = false\n dns_lookup_realm = false\n"
            " dns_canonicalize_hostname = false\n rdns = false\n udp_preference_limit = 1\n"
            " ticket_lifetime = 1h\n\n"
            "[realms]\n %s = {\n  kdc = %s:%d\n }\n" % (REALM, REALM, HOST, self.port))
        d = self.dir
        self.kdc_conf.write_text(
            "[kdcdefaults]\n kdc_listen = %s:%d\n kdc_tcp_listen = %s:%d\n\n"
            "[realms]\n %s = {\n  database_name = %s\n  key_stash_file = %s\n  acl_file = %s\n"
            "  kdc_listen = %s:%d\n  kdc_tcp_listen = %s:%d\n  max_life = 1h\n }\n\n"
            "[logging]\n kdc = FILE:%s\n" % (HOST, self.port, HOST, self.port, REALM, d / "principal",
                                             d / "stash", d / "kadm5.acl", HOST, self.port, HOST,
                                             self.port, self.log))
        (d / "kadm5.acl").write_text("")

    @property
    def env(self):
        env = dict(os.environ)
        env.update({"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)})
        return env

    def _run(self, *cmd):
        r = subprocess.run([tool(cmd[0])] + list(cmd[1:]), env=self.env, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s %s" % (cmd[0], r.returncode, r.stdout, r.stderr))
        return r.stdout

    def start(self):
        self._run("kdb5_util", "create", "-s", "-r", REALM, "-P", "throwaway-master-key")
        self.proc = subprocess.Popen([tool("krb5kdc"), "-n", "-r", REALM], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "krb5kdc.stderr", "wb"))

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError("krb5kdc exited with %s: %s" % (self.proc.returncode, tail(self.log)))
            return port_accepts(self.port)
        wait_until(up, 20, what="krb5kdc on %d" % self.port)
        return self

    def principal(self, name):
        """Adds name (without realm) with a random key; returns (principal, keytab path)."""
        self._run("kadmin.local", "-r", REALM, "-q", "addprinc -randkey %s" % name)
        keytab = self.dir / ("%s.keytab" % name.replace("/", "_"))
        self._run("kadmin.local", "-r", REALM, "-q", "ktadd -k %s %s" % (keytab, name))
        return "%s@%s" % (name, REALM), keytab

    def kinit(self, principal, keytab, ccache):
        self._run("kinit", "-k", "-t", str(keytab), "-c", str(ccache), principal)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            wait_or_kill(self.proc, 10)
