/* SPDX-License-Identifier: MIT */
/*
 * The AWS shared files (~/.aws/credentials, ~/.aws/config) parsed the way
 * botocore parses them: keys case-insensitive (kept lowercased), '=' or
 * ':' between key and value, whole-line comments ('#', ';'), indented
 * lines continuing the value above, and a value that starts empty and
 * goes on with indented "sub = value" lines read as a nested section
 * (kept as "parent.sub").  Sections: "[profile NAME]" and "[default]" in
 * the config file, "[NAME]" in the credentials file, are profile NAME;
 * "[services NAME]" and "[sso-session NAME]" keep their header.
 */
#ifndef CKPT_S3_INI_H
#define CKPT_S3_INI_H

#include <stdbool.h>
#include <stddef.h>

struct ckpt_ini_ent {
	char *section;		/* profile name, or "services NAME" */
	char *key;		/* lowercased; "s3.addressing_style" */
	char *value;		/* trimmed; continuation lines joined by
				 * '\n' */
};

/* A parsed file; every string owned.  Free with ckpt_ini_destroy(). */
struct ckpt_ini {
	char *path;		/* as read, for messages (or NULL) */
	bool exists;		/* the file was there */
	struct ckpt_ini_ent *e;
	size_t n, cap;
	char **sections;	/* every section seen, in order */
	size_t nsec, capsec;
};

/*
 * Parse NUL-terminated text (modified) into ini (zeroed by the caller).
 * config_style: the config file's section names.  Returns 0 or -ENOMEM.
 * Later values of a key in the same section replace earlier ones.
 */
int ckpt_ini_parse(char *text, bool config_style, struct ckpt_ini *ini);

/*
 * Read and parse the file at path into ini (zeroed by the caller; path
 * copied).  A missing file is no error (ini->exists false) unless
 * named_by names the option it came from.  Returns 0, or -errno with one
 * line in err naming the file.  The text read is wiped after parsing.
 */
int ckpt_ini_load(const char *path, bool config_style, const char *named_by,
		  struct ckpt_ini *ini, char *err, size_t errlen);

/* The value of key (lowercase) in section, or NULL.  Borrowed: valid
 * until ini is destroyed. */
const char *ckpt_ini_get(const struct ckpt_ini *ini, const char *section,
			 const char *key);

/* Is there a section of that name? */
bool ckpt_ini_has_section(const struct ckpt_ini *ini, const char *section);

/* Wipe every value and free everything.  Accepts a zeroed ini. */
void ckpt_ini_destroy(struct ckpt_ini *ini);

#endif
