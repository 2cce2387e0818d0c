/* SPDX-License-Identifier: MIT */
/* Safe relative paths inside a checkpoint: see relpath.h. */
#include "common/relpath.h"

#include <string.h>

bool ckpt_relpath_is_safe(const char *s, uint32_t len)
{
	uint32_t i, start = 0;

	if (len == 0 || len > 4095 || s[0] == '/' || s[len - 1] == '/' ||
	    memchr(s, '\0', len))
		return false;
	for (i = 0; i <= len; i++) {
		if (i == len || s[i] == '/') {
			if (i - start == 2 && s[start] == '.' &&
			    s[start + 1] == '.')
				return false;
			start = i + 1;
		}
	}
	return true;
}
