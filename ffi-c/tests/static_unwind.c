/* Links against the static library as scripts/package makes it (ffi-c/make-static-library, here
 * with the test hooks kept) and checks that a panic is still caught at the C boundary: the
 * object's unwind tables survived the garbage collection of sections. Run by scripts/test-c. */
#define RK_TEST_HOOKS
#include <stdio.h>

#include "ratekeeper.h"

int main(void) {
  enum rk_status status = rk_test_panic();
  if (status != RK_PANIC) {
    fprintf(stderr, "rk_test_panic returned %d, not RK_PANIC\n", (int)status);
    return 1;
  }
  puts("static library: a panic is caught at the boundary (unwind tables kept)");
  return 0;
}
