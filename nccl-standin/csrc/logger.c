/*
 * NCCL's logger is a C variadic function (ncclDebugLogger_t):
 *   void (*)(ncclDebugLogLevel level, unsigned long flags, const char *filefunc, int line,
 *            const char *fmt, ...)
 * Stable Rust cannot define one, so this file does: it formats the message with vsnprintf and
 * hands the finished text to a sink the Rust side installs (ferro_standin_set_sink). There is no
 * link-time reference from C to Rust; until a sink is installed, messages go to stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*ferro_tests_sink_fn)(int level, unsigned long flags, const char *filefunc, int line,
                                    const char *text);

static ferro_tests_sink_fn sink;

void ferro_standin_set_sink(ferro_tests_sink_fn f) { __atomic_store_n(&sink, f, __ATOMIC_RELEASE); }

static void deliver(int level, unsigned long flags, const char *filefunc, int line, const char *text) {
  ferro_tests_sink_fn f = __atomic_load_n(&sink, __ATOMIC_ACQUIRE);
  if (f) {
    f(level, flags, filefunc, line, text);
  } else {
    fprintf(stderr, "[ferro-tests logger, no sink] %d %s\n", level, text);
  }
}

void ferro_standin_logger(int level, unsigned long flags, const char *filefunc, int line, const char *fmt,
                          ...) {
  if (fmt == NULL) {
    deliver(level, flags, filefunc, line, "(NULL format)");
    return;
  }
  char small[1024];
  va_list ap;
  va_list again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    deliver(level, flags, filefunc, line, "(vsnprintf failed)");
  } else if ((size_t)n < sizeof small) {
    deliver(level, flags, filefunc, line, small);
  } else {
    char *big = malloc((size_t)n + 1);
    if (big != NULL) {
      vsnprintf(big, (size_t)n + 1, fmt, again);
      deliver(level, flags, filefunc, line, big);
      free(big);
    } else {
      deliver(level, flags, filefunc, line, small); /* truncated, but delivered */
    }
  }
  va_end(again);
}
