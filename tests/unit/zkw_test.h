/* zkw_test.h: a tiny header-only test harness for zkwarden's unit tests.
 *
 * A test is a void function; RUN(fn) runs it and counts it as passed or
 * failed. The ASSERT_* macros print the expression, both operands, file and
 * line, mark the current test failed and return from the calling function
 * (which may be a helper called by the test). ZKW_TEST_MAIN_END prints
 * "<suite>: N passed, M failed" and yields the exit status. */
#ifndef ZKW_TEST_H
#define ZKW_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int zkw_t_passed, zkw_t_failed, zkw_t_cur_failed;
static const char *zkw_t_cur_name = "";

static inline void zkw_t_hexdump(const char *label, const void *p, size_t n) {
  const unsigned char *b = p;
  fprintf(stderr, "    %s (%zu bytes):", label, n);
  for (size_t i = 0; i < n && i < 96; i++)
    fprintf(stderr, "%s%02x", i % 16 ? " " : "\n      ", b[i]);
  fprintf(stderr, "%s\n", n > 96 ? " ..." : "");
}

#define ZKW_T_FAIL_HEAD(file, line, what)                                                                    \
  do {                                                                                                       \
    zkw_t_cur_failed++;                                                                                      \
    fprintf(stderr, "FAIL %s (%s:%d): %s\n", zkw_t_cur_name, file, line, what);                              \
  } while (0)

/* Integers (any integer type, compared as intmax_t). */
#define ASSERT_EQ(a, b)                                                                                      \
  do {                                                                                                       \
    intmax_t zkw_t_a = (intmax_t)(a), zkw_t_b = (intmax_t)(b);                                               \
    if (zkw_t_a != zkw_t_b) {                                                                                \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #a " == " #b);                                                     \
      fprintf(stderr, "    left:  %jd (0x%jx)\n    right: %jd (0x%jx)\n", zkw_t_a, (uintmax_t)zkw_t_a,       \
              zkw_t_b, (uintmax_t)zkw_t_b);                                                                  \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

#define ASSERT_NE(a, b)                                                                                      \
  do {                                                                                                       \
    intmax_t zkw_t_a = (intmax_t)(a), zkw_t_b = (intmax_t)(b);                                               \
    if (zkw_t_a == zkw_t_b) {                                                                                \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #a " != " #b);                                                     \
      fprintf(stderr, "    both: %jd\n", zkw_t_a);                                                           \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

#define ASSERT_TRUE(c)                                                                                       \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #c " is false");                                                   \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

/* Status codes: like ASSERT_EQ, but also names them (needs zkw_strerror). */
#define ASSERT_STATUS(a, b)                                                                                  \
  do {                                                                                                       \
    int zkw_t_a = (a), zkw_t_b = (b);                                                                        \
    if (zkw_t_a != zkw_t_b) {                                                                                \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #a " == " #b);                                                     \
      fprintf(stderr, "    left:  %d (%s)\n    right: %d (%s)\n", zkw_t_a, zkw_strerror(zkw_t_a), zkw_t_b,   \
              zkw_strerror(zkw_t_b));                                                                        \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

#define ASSERT_STREQ(a, b)                                                                                   \
  do {                                                                                                       \
    const char *zkw_t_a = (a), *zkw_t_b = (b);                                                               \
    if (!zkw_t_a || !zkw_t_b || strcmp(zkw_t_a, zkw_t_b) != 0) {                                             \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #a " == " #b);                                                     \
      fprintf(stderr, "    left:  \"%s\"\n    right: \"%s\"\n", zkw_t_a ? zkw_t_a : "(null)",                \
              zkw_t_b ? zkw_t_b : "(null)");                                                                 \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

#define ASSERT_MEMEQ(a, alen, b, blen)                                                                       \
  do {                                                                                                       \
    const void *zkw_t_a = (a), *zkw_t_b = (b);                                                               \
    size_t zkw_t_al = (size_t)(alen), zkw_t_bl = (size_t)(blen);                                             \
    if (zkw_t_al != zkw_t_bl || (zkw_t_al && memcmp(zkw_t_a, zkw_t_b, zkw_t_al) != 0)) {                     \
      ZKW_T_FAIL_HEAD(__FILE__, __LINE__, #a " == " #b " (bytes)");                                          \
      zkw_t_hexdump("left", zkw_t_a, zkw_t_al);                                                              \
      zkw_t_hexdump("right", zkw_t_b, zkw_t_bl);                                                             \
      return;                                                                                                \
    }                                                                                                        \
  } while (0)

/* Runs one test function under a name. */
#define RUN_NAMED(name, call)                                                                                \
  do {                                                                                                       \
    zkw_t_cur_name = (name);                                                                                 \
    zkw_t_cur_failed = 0;                                                                                    \
    call;                                                                                                    \
    if (zkw_t_cur_failed)                                                                                    \
      zkw_t_failed++;                                                                                        \
    else                                                                                                     \
      zkw_t_passed++;                                                                                        \
  } while (0)
#define RUN(fn) RUN_NAMED(#fn, fn())

/* Propagates a failure from a helper: returns if the current test failed. */
#define ASSERT_OK_SO_FAR()                                                                                   \
  do {                                                                                                       \
    if (zkw_t_cur_failed) return;                                                                            \
  } while (0)

static inline int zkw_test_summary(const char *suite) {
  printf("%s: %d passed, %d failed\n", suite, zkw_t_passed, zkw_t_failed);
  return zkw_t_failed ? 1 : 0;
}

#endif
