/* SPDX-License-Identifier: MIT */
/* Transform descriptors: see transforms.h. */
#include "model/transforms.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "common/errbuf.h"

#define SHOWN 80

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

/* A run of name characters from d[*i]; its length. */
static size_t take_name(const char *d, size_t len, size_t *i)
{
	size_t s = *i;

	while (*i < len && name_char(d[*i]))
		(*i)++;
	return *i - s;
}

int ckpt_transform_parse(const char *d, size_t len, enum ckpt_transform *out,
			 char *why, size_t whylen)
{
	size_t i = 0, name_len, dom_len = 0, ver_at = 0, ver_len = 0, major;
	int shown = (int)(len > SHOWN ? SHOWN : len);

	name_len = take_name(d, len, &i);
	if (i < len && d[i] == '@') {
		i++;
		dom_len = take_name(d, len, &i);
		if (!dom_len)
			goto malformed;
	}
	if (i < len && d[i] == '/') {
		i++;
		ver_at = i;
		while (i < len && ((d[i] >= '0' && d[i] <= '9') ||
				   (d[i] == '.' && i > ver_at &&
				    d[i - 1] != '.')))
			i++;
		ver_len = i - ver_at;
		if (!ver_len || d[i - 1] == '.')
			goto malformed;
	}
	if (!name_len || i != len)
		goto malformed;
	/* The registry is keyed by name[@domain]; the version's major part
	 * selects the decoder's version (torch: version.partition(".")). */
	if (dom_len || name_len != 11 || memcmp(d, "stream.zstd", 11))
		return ckpt_errf(why, whylen, -ENOTSUP,
				 "transform '%.*s' is not supported (ckptfs decodes stream.zstd/1)",
				 shown, d);
	for (major = 0; major < ver_len && d[ver_at + major] != '.'; major++)
		;
	if (major != 1 || d[ver_at] != '1')
		return ckpt_errf(why, whylen, -ENOTSUP,
				 "transform '%.*s': version %s is not supported (ckptfs decodes stream.zstd/1)",
				 shown, d, ver_len ? "other than 1" : "missing");
	*out = CKPT_XFORM_ZSTD;
	return 0;
malformed:
	return ckpt_errf(why, whylen, -EINVAL,
			 "transform descriptor '%.*s' is not name[@domain][/version]",
			 shown, d);
}

const char *ckpt_transform_name(enum ckpt_transform t)
{
	return t == CKPT_XFORM_ZSTD ? "stream.zstd/1" : "?";
}

const char *ckpt_payload_name(enum ckpt_payload p)
{
	return p == CKPT_PAYLOAD_TORCH_SAVE ? "torch.save" : "raw";
}

int ckpt_payload_parse(const char *s, size_t len)
{
	if (len == 3 && !memcmp(s, "raw", 3))
		return CKPT_PAYLOAD_RAW;
	if (len == 10 && !memcmp(s, "torch.save", 10))
		return CKPT_PAYLOAD_TORCH_SAVE;
	return -1;
}
