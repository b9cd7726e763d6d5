/* Names of program inputs, weights and exported libraries: they become C
 * identifiers in exported headers, so one rule serves everywhere. */
#include "runtime/runtime.h"

bool lm_is_name(const char *s, size_t len) {
  if (!s || len < 1 || len > LM_MAX_NAME || (s[0] >= '0' && s[0] <= '9')) return false;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return false;
  }
  return true;
}
