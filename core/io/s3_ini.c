/* SPDX-License-Identifier: MIT */
/* The AWS shared files, parsed as botocore parses them: see s3_ini.h. */
#include "io/s3_ini.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"

#define AWS_FILE_MAX (1u << 20)	/* a larger ~/.aws file is refused */

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

static void lower(char *s)
{
	for (; *s; s++)
		*s = (char)tolower((unsigned char)*s);
}

static int add_section(struct ckpt_ini *ini, const char *name)
{
	char **ns;

	if (ckpt_ini_has_section(ini, name))
		return 0;
	if (ini->nsec == ini->capsec) {
		size_t cap = ini->capsec ? 2 * ini->capsec : 8;

		ns = realloc(ini->sections, cap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		ini->sections = ns;
		ini->capsec = cap;
	}
	ini->sections[ini->nsec] = strdup(name);
	if (!ini->sections[ini->nsec])
		return -ENOMEM;
	ini->nsec++;
	return 0;
}

/* Set section.key = value (all copied), replacing an earlier value. */
static int put(struct ckpt_ini *ini, const char *section, const char *key,
	       const char *value)
{
	struct ckpt_ini_ent *ne;
	char *v;
	size_t i;

	v = strdup(value);
	if (!v)
		return -ENOMEM;
	for (i = 0; i < ini->n; i++)
		if (!strcmp(ini->e[i].section, section) &&
		    !strcmp(ini->e[i].key, key)) {
			wipe_free(ini->e[i].value);
			ini->e[i].value = v;
			return 0;
		}
	if (ini->n == ini->cap) {
		size_t cap = ini->cap ? 2 * ini->cap : 16;

		ne = realloc(ini->e, cap * sizeof(*ne));
		if (!ne) {
			free(v);
			return -ENOMEM;
		}
		ini->e = ne;
		ini->cap = cap;
	}
	ne = &ini->e[ini->n];
	ne->section = strdup(section);
	ne->key = strdup(key);
	ne->value = v;
	if (!ne->section || !ne->key) {
		free(ne->section);
		free(ne->key);
		free(v);
		return -ENOMEM;
	}
	ini->n++;
	return 0;
}

/* Append "\n" line to the value of the last entry (a continuation). */
static int append(struct ckpt_ini_ent *e, const char *line)
{
	size_t a = strlen(e->value), b = strlen(line);
	char *v = malloc(a + b + 2);

	if (!v)
		return -ENOMEM;
	memcpy(v, e->value, a);
	v[a] = a ? '\n' : '\0';
	memcpy(v + a + (a ? 1 : 0), line, b + 1);
	wipe_free(e->value);
	e->value = v;
	return 0;
}

/* The section a header names, in buf; false: not one read. */
static bool section_name(char *hdr, bool config_style, char *buf, size_t cap)
{
	hdr = trim(hdr);
	if (config_style) {
		if (!strncmp(hdr, "profile", 7) &&
		    (hdr[7] == ' ' || hdr[7] == '\t')) {
			snprintf(buf, cap, "%s", trim(hdr + 7));
			return buf[0] != '\0';
		}
		if (!strcmp(hdr, "default") ||
		    !strncmp(hdr, "services ", 9) ||
		    !strncmp(hdr, "sso-session ", 12)) {
			snprintf(buf, cap, "%s", hdr);
			return true;
		}
		return false;	/* botocore reads no other section */
	}
	snprintf(buf, cap, "%s", hdr);
	return buf[0] != '\0';
}

/* Split "key = value" (or "key: value"); false when there is neither. */
static bool split_kv(char *line, char **key, char **val)
{
	char *d = strpbrk(line, "=:");

	if (!d)
		return false;
	*d = '\0';
	*key = trim(line);
	*val = trim(d + 1);
	lower(*key);
	return (*key)[0] != '\0';
}

int ckpt_ini_parse(char *text, bool config_style, struct ckpt_ini *ini)
{
	char section[256] = "", parent[128] = "", *line, *next;
	bool in = false, have_key = false;
	size_t last = 0;
	int rc = 0;

	for (line = text; line && rc == 0; line = next) {
		char *key, *val, *t;
		bool indented;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		indented = line[0] == ' ' || line[0] == '\t';
		t = trim(line);
		if (!t[0] || t[0] == '#' || t[0] == ';')
			continue;
		if (indented && in && have_key) {
			char full[300];

			/* A nested section ("s3 =\n  addressing_style =
			 * path") or a continuation of the value above. */
			if (parent[0] && split_kv(t, &key, &val)) {
				snprintf(full, sizeof(full), "%s.%s", parent,
					 key);
				rc = put(ini, section, full, val);
			} else if (!parent[0]) {
				rc = append(&ini->e[last], t);
			}
			continue;
		}
		if (t[0] == '[') {
			char *close = strrchr(t, ']');

			have_key = false;
			parent[0] = '\0';
			if (!close) {
				in = false;
				continue;
			}
			*close = '\0';
			in = section_name(t + 1, config_style, section,
					  sizeof(section));
			if (in)
				rc = add_section(ini, section);
			continue;
		}
		if (!in || !split_kv(t, &key, &val)) {
			have_key = false;
			continue;
		}
		rc = put(ini, section, key, val);
		if (rc)
			break;
		for (last = 0; last < ini->n; last++)
			if (!strcmp(ini->e[last].section, section) &&
			    !strcmp(ini->e[last].key, key))
				break;
		have_key = true;
		if (!val[0])
			snprintf(parent, sizeof(parent), "%s", key);
		else
			parent[0] = '\0';
	}
	return rc;
}

int ckpt_ini_load(const char *path, bool config_style, const char *named_by,
		  struct ckpt_ini *ini, char *err, size_t errlen)
{
	struct stat st;
	char *text;
	size_t got = 0;
	int fd, rc;

	ini->path = strdup(path);
	if (!ini->path)
		return ckpt_errf(err, errlen, -ENOMEM, "out of memory");
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if ((errno == ENOENT || errno == ENOTDIR) && !named_by)
			return 0;
		if (named_by)
			return ckpt_errf(err, errlen, -errno, "%s (from the %s "
					 "option): %s", path, named_by,
					 strerror(errno));
		return ckpt_errf(err, errlen, -errno, "%s: %s", path,
				 strerror(errno));
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return ckpt_errf(err, errlen, -EINVAL,
				 "%s: not a regular file", path);
	}
	if (st.st_size > AWS_FILE_MAX) {
		close(fd);
		return ckpt_errf(err, errlen, -EFBIG,
				 "%s: larger than %u bytes", path,
				 AWS_FILE_MAX);
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		return ckpt_errf(err, errlen, -ENOMEM, "%s: out of memory",
				 path);
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	text[got] = '\0';
	ini->exists = true;
	rc = ckpt_ini_parse(text, config_style, ini);
	explicit_bzero(text, got);
	free(text);
	if (rc)
		return ckpt_errf(err, errlen, rc, "%s: out of memory", path);
	return 0;
}

const char *ckpt_ini_get(const struct ckpt_ini *ini, const char *section,
			 const char *key)
{
	size_t i;

	for (i = 0; i < ini->n; i++)
		if (!strcmp(ini->e[i].section, section) &&
		    !strcmp(ini->e[i].key, key))
			return ini->e[i].value;
	return NULL;
}

bool ckpt_ini_has_section(const struct ckpt_ini *ini, const char *section)
{
	size_t i;

	for (i = 0; i < ini->nsec; i++)
		if (!strcmp(ini->sections[i], section))
			return true;
	return false;
}

void ckpt_ini_destroy(struct ckpt_ini *ini)
{
	size_t i;

	for (i = 0; i < ini->n; i++) {
		free(ini->e[i].section);
		free(ini->e[i].key);
		wipe_free(ini->e[i].value);
	}
	for (i = 0; i < ini->nsec; i++)
		free(ini->sections[i]);
	free(ini->e);
	free(ini->sections);
	free(ini->path);
	memset(ini, 0, sizeof(*ini));
}
