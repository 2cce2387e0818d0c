/* SPDX-License-Identifier: MIT */
/* CRC-32 (ISO-HDLC, as zip and torch.save store it), slicing by 8. */
#ifndef CKPT_CRC32_H
#define CKPT_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continue crc (0 to start) over buf[0, len).  Thread-safe. */
uint32_t ckpt_crc32(uint32_t crc, const void *buf, size_t len);

#endif
