/* zkw_fault.c: the counters behind ZKW_FAULT (zkw_fault.h). Compiled to
 * nothing unless ZKW_FAULT_INJECTION is defined. Calls come from the loop
 * thread and from libzookeeper's and libuv's worker threads: atomics. */
#include "zkw_fault.h"

#ifdef ZKW_FAULT_INJECTION
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "zkw_log.h"

static const char *const kind_names[] = {
#define ZKW_FAULT_NAME(name, what) #name,
    ZKW_FAULT_KINDS(ZKW_FAULT_NAME)
#undef ZKW_FAULT_NAME
};

static atomic_ullong calls[ZKW_FAULT_KIND_COUNT];
static char process_name[48]; /* " (name)" after "fault injection", or "" */

void zkw_fault_name_process(const char *name) {
  snprintf(process_name, sizeof process_name, " (%s)", name);
}

static const char *who(void) {
  return process_name;
}

/* Each point (file:line) and the number of the first call of its kind made
 * there: failing exactly those calls fails every point once. */
#define SITES_MAX 512
struct site {
  const char *where;
  const char *detail;
  int kind;
  unsigned long long first;
};
static struct site sites[SITES_MAX];
static int nsites;
static pthread_mutex_t sites_mu = PTHREAD_MUTEX_INITIALIZER;

static bool same(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

static void note_site(int kind, const char *where, const char *detail, unsigned long long n) {
  pthread_mutex_lock(&sites_mu);
  int i = 0;
  while (i < nsites &&
         !(sites[i].kind == kind && same(sites[i].where, where) && same(sites[i].detail, detail)))
    i++;
  if (i == nsites && nsites < SITES_MAX) sites[nsites++] = (struct site){where, detail, kind, n};
  pthread_mutex_unlock(&sites_mu);
}
static int fail_kind = -1;
static unsigned long long fail_at;
static int fail_code;
static bool have_code;
/* kind:N@point: the Nth call at the points so named (their detail, or the
 * end of their file:line), counted apart. */
static char fail_point[128];
static atomic_ullong point_calls;

static bool point_named(const char *where, const char *detail) {
  if (detail && strcmp(detail, fail_point) == 0) return true;
  size_t n = where ? strlen(where) : 0, m = strlen(fail_point);
  return n >= m && strcmp(where + n - m, fail_point) == 0;
}

int zkw_fault_init(void) {
  const char *named = getenv("ZKW_TEST_FAULT_PROCESS");
  if (named && *named) zkw_fault_name_process(named);
  const char *v = getenv("ZKW_TEST_FAULT");
  if (!v || !*v) return 0;
  char name[32], spec[200];
  unsigned long long n = 0;
  int code = 0;
  snprintf(spec, sizeof spec, "%s", v);
  char *at = strchr(spec, '@');
  if (at) {
    *at = 0;
    snprintf(fail_point, sizeof fail_point, "%s", at + 1);
  }
  int got = sscanf(spec, "%31[a-z]:%llu:%d", name, &n, &code);
  for (int k = 0; got >= 2 && k < ZKW_FAULT_KIND_COUNT; k++)
    if (strcmp(name, kind_names[k]) == 0 && n > 0) {
      fail_kind = k;
      fail_at = n;
      fail_code = code;
      have_code = got == 3;
      zkw_log_warn("fault injection%s: the call #%llu of kind %s%s%s will fail", who(), n, name,
                   fail_point[0] ? " at " : "", fail_point);
      return 0;
    }
  fprintf(stderr, "ZKW_TEST_FAULT=%s: expected kind:N[:code][@point] with N >= 1 and kind one of", v);
  for (int k = 0; k < ZKW_FAULT_KIND_COUNT; k++)
    fprintf(stderr, " %s", kind_names[k]);
  fprintf(stderr, "\n");
  return -1;
}

bool zkw_fault_hit(enum zkw_fault_kind kind, const char *where, const char *detail) {
  unsigned long long n = atomic_fetch_add(&calls[kind], 1) + 1;
  note_site(kind, where, detail, n);
  if ((int)kind != fail_kind) return false;
  if (fail_point[0] && (!point_named(where, detail) || atomic_fetch_add(&point_calls, 1) + 1 != fail_at))
    return false;
  if (!fail_point[0] && n != fail_at) return false;
  zkw_log_warn("fault injection%s: failing %s #%llu at %s%s%s", who(), kind_names[kind], n, where,
               detail ? "/" : "", detail ? detail : "");
  return true;
}

int zkw_fault_code(int dflt) {
  return have_code ? fail_code : dflt;
}

void zkw_fault_report(void) {
  for (int k = 0; k < ZKW_FAULT_KIND_COUNT; k++)
    zkw_log_info("fault injection%s: %s: %llu calls", who(), kind_names[k],
                 (unsigned long long)atomic_load(&calls[k]));
  pthread_mutex_lock(&sites_mu);
  for (int i = 0; i < nsites; i++)
    zkw_log_info("fault injection%s: point %s%s%s first at %s #%llu", who(), sites[i].where,
                 sites[i].detail ? "/" : "", sites[i].detail ? sites[i].detail : "",
                 kind_names[sites[i].kind], sites[i].first);
  pthread_mutex_unlock(&sites_mu);
}
#endif
