/* SPDX-License-Identifier: MIT */
/* Relative paths that a checkpoint's records may name. */
#ifndef CKPT_RELPATH_H
#define CKPT_RELPATH_H

#include <stdbool.h>
#include <stdint.h>

/* True when a record's relative_path stays inside the checkpoint: not
 * empty, not absolute, no '..' component, no NUL. */
bool ckpt_relpath_is_safe(const char *s, uint32_t len);

#endif
