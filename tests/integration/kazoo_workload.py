"""The kazoo differential workload.

kazoo 2.8 has no API for containers (opcode 19) or TTL nodes (opcode 21), so
those two requests are built here on kazoo's own request machinery and sent
through the client's normal queue (KazooClient._call), like any other call.
"""

import struct
from collections import namedtuple

from kazoo.exceptions import KazooException
from kazoo.protocol.serialization import Create, int_struct, stat_struct, read_string, \
    write_buffer, write_string
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL, Id, OPEN_ACL_UNSAFE, Permissions, make_digest_acl

from transcript import Transcript, digest

BIG_SIZE = 1000000
MANY = 10000


def big_data():
    return bytes((i * 7 + 3) & 0xFF for i in range(BIG_SIZE))


def many_names():
    # 105-byte names: the getChildren reply is 1,090,020 bytes, over the
    # 1 MiB that Java clients and the server accept inbound (design section 9)
    return ["n%05d-%s" % (i, "x" * 98) for i in range(MANY)]


def _serialize_create(path, data, acl, flags):
    b = bytearray()
    b.extend(write_string(path))
    b.extend(write_buffer(data))
    b.extend(int_struct.pack(len(acl)))
    for a in acl:
        b.extend(int_struct.pack(a.perms) + write_string(a.id.scheme) + write_string(a.id.id))
    b.extend(int_struct.pack(flags))
    return b


def _deserialize_create2(bytes_, offset):
    path, offset = read_string(bytes_, offset)
    return path, ZnodeStat._make(stat_struct.unpack_from(bytes_, offset))


class CreateContainer(namedtuple("CreateContainer", "path data acl")):
    type = 19

    def serialize(self):
        return _serialize_create(self.path, self.data, self.acl, 4)

    @classmethod
    def deserialize(cls, bytes_, offset):
        return _deserialize_create2(bytes_, offset)


class CreateTTL(namedtuple("CreateTTL", "path data acl flags ttl")):
    type = 21

    def serialize(self):
        return _serialize_create(self.path, self.data, self.acl, self.flags) + \
            struct.pack("!q", self.ttl)

    @classmethod
    def deserialize(cls, bytes_, offset):
        return _deserialize_create2(bytes_, offset)


def raw_call(client, request, timeout=15):
    result = client.handler.async_result()
    client._call(request, result)
    return result.get(timeout=timeout)


def run(target_hostport, root, kazoo_factory, another):
    """Run the workload under `root` with its client on target_hostport;
    the other sessions connect to another() (see conftest.Target).
    Returns a Transcript."""
    T = Transcript(root)
    R = root
    c = kazoo_factory(target_hostport)
    helper = kazoo_factory(another())   # another session, for watches and ACLs
    T.self_sid = c.client_id[0]

    # ---- create modes
    T.step("create root", c.create, R)
    T.step("create persistent", c.create, R + "/p", b"v0")
    T.step("create persistent again", c.create, R + "/p", b"x")
    T.step("create ephemeral", c.create, R + "/e", b"eph", ephemeral=True)
    T.step("exists ephemeral", c.exists, R + "/e")
    T.step("create sequential 1", c.create, R + "/s-", b"", sequence=True)
    T.step("create sequential 2", c.create, R + "/s-", b"", sequence=True)
    es = T.step("create ephemeral sequential", c.create, R + "/es-", b"", ephemeral=True,
                sequence=True)
    T.step("exists ephemeral sequential", c.exists, es)
    T.step("create container", raw_call, c, CreateContainer(R + "/ctr", b"cdata",
                                                            OPEN_ACL_UNSAFE))
    T.step("create child of container", c.create, R + "/ctr/kid", b"")
    T.step("create ttl", raw_call, c, CreateTTL(R + "/ttl", b"tdata", OPEN_ACL_UNSAFE, 5,
                                                600000))
    T.step("create ttl sequential", raw_call, c, CreateTTL(R + "/ttls-", b"", OPEN_ACL_UNSAFE,
                                                           6, 600000))
    T.step("create ttl zero (bad)", raw_call, c, CreateTTL(R + "/ttl0", b"", OPEN_ACL_UNSAFE,
                                                           5, 0))
    T.step("create2", c.create, R + "/c2", b"data2", include_data=True)
    T.step("create2 sequential ephemeral", c.create, R + "/c2s-", b"", ephemeral=True,
           sequence=True, include_data=True)
    T.step("create under ephemeral", c.create, R + "/e/kid", b"")
    T.step("create without parent", c.create, R + "/no/such", b"")
    T.step("create makepath", c.create, R + "/mk/a/b", b"deep", makepath=True)

    # ---- get / set / exists / delete
    T.step("get", c.get, R + "/p")
    T.step("set", c.set, R + "/p", b"v1")
    T.step("set version 1", c.set, R + "/p", b"v2", version=1)
    T.step("set bad version", c.set, R + "/p", b"v3", version=0)
    T.step("get after sets", c.get, R + "/p")
    T.step("set empty", c.set, R + "/mk/a/b", b"")
    T.step("get empty", c.get, R + "/mk/a/b")
    T.step("exists missing", c.exists, R + "/missing")
    T.step("get missing", c.get, R + "/missing")
    T.step("set missing", c.set, R + "/missing", b"")
    T.step("delete missing", c.delete, R + "/missing")
    T.step("delete bad version", c.delete, R + "/p", version=5)
    T.step("delete not empty", c.delete, R + "/mk")
    T.step("delete with version", c.delete, R + "/p", version=2)
    T.step("exists deleted", c.exists, R + "/p")
    T.step("delete recursive", c.delete, R + "/mk", recursive=True)
    T.step("exists after recursive", c.exists, R + "/mk")

    # ---- children, sync
    T.step("children", lambda: sorted(c.get_children(R)))
    T.step("children with data", lambda: (lambda r: (sorted(r[0]), r[1]))(
        c.get_children(R, include_data=True)))
    T.step("children missing", c.get_children, R + "/missing")
    T.step("sync", c.sync, R)

    # ---- ACLs and digest auth
    acl_node = R + "/acl"
    digest_all = make_digest_acl("alice", "secret", all=True)
    T.step("add_auth", c.add_auth, "digest", "alice:secret")
    T.step("create acl node", c.create, acl_node, b"private", acl=[digest_all])
    T.step("get_acls", c.get_acls, acl_node)
    T.step("get acl node as owner", c.get, acl_node)
    T.step("unauth get", helper.get, acl_node)
    T.step("unauth get_acls", helper.get_acls, acl_node)
    world_read = ACL(Permissions.READ, Id("world", "anyone"))
    T.step("set_acls bad version", c.set_acls, acl_node, [digest_all, world_read], version=3)
    T.step("set_acls", c.set_acls, acl_node, [digest_all, world_read], version=0)
    T.step("get_acls after set", c.get_acls, acl_node)
    T.step("unauth get after set_acls", helper.get, acl_node)
    T.step("unauth set after set_acls", helper.set, acl_node, b"nope")
    T.step("unauth create child", helper.create, acl_node + "/kid", b"")
    wrong = kazoo_factory(another())
    T.step("wrong password add_auth", wrong.add_auth, "digest", "alice:wrong")
    T.step("wrong password set", wrong.set, acl_node, b"nope")
    wrong.stop()
    bad_scheme = kazoo_factory(another())
    T.step("unknown auth scheme", bad_scheme.add_auth, "nosuchscheme", "x")
    bad_scheme.stop()
    # kazoo replaces an empty ACL list by its default: send the request itself
    T.step("empty acl list", raw_call, c, Create(R + "/noacl", b"", [], 0))

    # ---- transactions
    t = c.transaction()
    t.create(R + "/tx1", b"a")
    t.set_data(R + "/tx1", b"b")
    t.check(R + "/tx1", 1)
    t.create(R + "/tx2", b"")
    t.delete(R + "/tx2")
    t.create(R + "/txs-", b"", sequence=True)
    T.step("multi commit", t.commit)
    t = c.transaction()
    t.create(R + "/tx3", b"")
    t.check(R + "/tx1", 99)
    t.set_data(R + "/tx1", b"c")
    T.step("multi fail", t.commit)
    T.step("multi fail left nothing", c.exists, R + "/tx3")
    T.step("multi get tx1", c.get, R + "/tx1")
    t = c.transaction()
    t.delete(R + "/missing")
    T.step("multi fail first op", t.commit)

    # ---- watches (triggered by the other session)
    w = R + "/w"
    c.create(w, b"w0")
    T.step("get with data watch", c.get, w, watch=T.watcher("data"))
    helper.set(w, b"w1")
    T.record_events("data watch events", "data", 1)
    T.step("children with child watch", c.get_children, w, watch=T.watcher("child"))
    helper.create(w + "/k1", b"")
    T.record_events("child watch events", "child", 1)
    T.step("exists watch on missing", c.exists, R + "/nw", watch=T.watcher("created"))
    helper.create(R + "/nw", b"")
    T.record_events("exists watch events", "created", 1)
    T.step("exists watch on present", c.exists, R + "/nw", watch=T.watcher("deleted"))
    T.step("data watch on same node", c.get, R + "/nw", watch=T.watcher("deleted2"))
    helper.delete(R + "/nw")
    T.record_events("delete events exists-watch", "deleted", 1)
    T.record_events("delete events data-watch", "deleted2", 1)
    T.step("children of container with watch", c.get_children, R + "/ctr",
           watch=T.watcher("ctr"))
    T.step("exists container with watch", c.exists, R + "/ctr", watch=T.watcher("ctr-gone"))
    helper.delete(R + "/ctr/kid")
    T.record_events("container child events", "ctr", 1)
    # the server removes the empty container by itself (check interval 1 s)
    T.record_events("container removed by server", "ctr-gone", 1, timeout=15)
    # and a TTL node once its TTL has passed
    T.step("create short ttl", raw_call, c, CreateTTL(R + "/ttlshort", b"", OPEN_ACL_UNSAFE,
                                                      5, 1500))
    T.step("exists short ttl with watch", c.exists, R + "/ttlshort",
           watch=T.watcher("ttl-gone"))
    T.record_events("ttl node removed by server", "ttl-gone", 1, timeout=15)

    # ---- big data
    data = big_data()
    T.step("create ~1MiB", c.create, R + "/big", data)
    T.step("get ~1MiB", c.get, R + "/big")
    T.step("helper get ~1MiB", helper.get, R + "/big")

    # ---- 10,000 children, pipelined
    parent = R + "/many"
    c.create(parent, b"")
    results = [c.create_async(parent + "/" + n, b"") for n in many_names()]
    errors = []
    for r in results:
        try:
            r.get(timeout=60)
        except KazooException as e:
            errors.append(type(e).__name__)
    T.add("pipelined creates errors", errors)
    kids = sorted(c.get_children(parent))
    T.add("many children count", len(kids))
    T.add("many children equal", kids == many_names())
    T.add("many children digest", digest("\n".join(kids).encode()))
    T.add("many children reply over 1 MiB",
          16 + 4 + sum(4 + len(k) for k in kids) > 1048575)
    T.step("many children2 stat", lambda: c.get_children(parent, include_data=True)[1])
    # pipelined reads interleaved with a write, answered in order
    futs = [c.get_async(parent + "/" + n) for n in many_names()[:500]]
    futs.append(c.set_async(parent, b"done"))
    futs += [c.exists_async(parent + "/" + n) for n in many_names()[500:1000]]
    vals = [f.get(timeout=60) for f in futs]
    T.add("pipelined mixed", [sum(1 for v in vals[:500] if v[0] == b""),
                              vals[500].version,
                              sum(1 for v in vals[501:] if v is not None)])

    # ---- session facts, then an oversized request (the server drops the
    # connection without a reply; the session itself survives)
    T.add("session still same", c.client_id[0] == T.self_sid)
    T.step("ephemerals still there", lambda: [c.exists(R + "/e") is not None,
                                             c.exists(es) is not None])
    T.step("oversized set", c.set, R + "/big", b"x" * (1024 * 1024 + 10))
    c.retry(c.exists, R)   # wait for the reconnect
    T.add("session same after oversize", c.client_id[0] == T.self_sid)
    T.step("get after oversized", lambda: len(c.get(R + "/big")[0]))

    helper.stop()
    c.stop()
    return T
