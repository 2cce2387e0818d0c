/* SPDX-License-Identifier: MIT */
/*
 * A small program on libckptfs alone: open a checkpoint, build the view
 * rank R of a world of W sees, and for each of its files print the path,
 * dtype, local shape, offsets, size, and an FNV-1a hash of its bytes.
 *
 *   cc example.c $(pkg-config --cflags --libs ckptfs) -o ckptfs-example
 *   ./ckptfs-example CKPT W R
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <ckptfs.h>

#define BUF (1 << 20)

static void print_dims(const uint64_t *d, unsigned n)
{
	unsigned i;

	printf("[");
	for (i = 0; i < n; i++)
		printf("%s%" PRIu64, i ? "," : "", d[i]);
	printf("]");
}

int main(int argc, char **argv)
{
	struct ckpt_view_opts o = { 0 };
	struct ckpt_meta *m = NULL;
	struct ckpt_view *v = NULL;
	struct ckpt_scratch *s = NULL;
	struct ckpt_view_info vi;
	char err[1024], path[4096];
	char *buf = NULL;
	uint32_t i;
	int status = 1;

	if (argc != 4) {
		fprintf(stderr, "usage: %s CKPT WORLD RANK\n", argv[0]);
		return 2;
	}
	o.world = (uint32_t)strtoul(argv[2], NULL, 10);
	o.rank = (uint32_t)strtoul(argv[3], NULL, 10);
	o.dtype = CKPT_DTYPE_COUNT;
	if (o.world < 1 || o.rank >= o.world) {
		fprintf(stderr, "need 0 <= RANK < WORLD\n");
		return 2;
	}
	if (ckpt_meta_open(argv[1], &m, err, sizeof(err)) ||
	    ckpt_files_open(m, 0, 0, err, sizeof(err)) ||
	    ckpt_view_new(m, &o, &v, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		goto out;
	}
	s = ckpt_scratch_new();
	buf = malloc(BUF);
	if (!s || !buf) {
		fprintf(stderr, "out of memory\n");
		goto out;
	}
	ckpt_view_info(v, &vi);
	printf("libckptfs %s: %u files, %" PRIu64 " bytes for rank %u of %u\n",
	       ckpt_version(), vi.nfiles, vi.total_bytes, o.rank, o.world);
	for (i = 1; i < vi.nnodes; i++) {
		struct ckpt_entry_info e;
		uint64_t off = 0, h = 1469598103934665603ull;
		size_t got, k;

		if (ckpt_view_entry(v, 0, i, &e) || e.key == CKPT_NONE)
			continue;	/* a directory */
		ckpt_view_path(v, i, path, sizeof(path));
		while (off < e.size) {
			if (ckpt_view_read(v, 0, i, off, BUF, buf, &got, s) ||
			    got == 0) {
				fprintf(stderr, "%s: %s\n", path,
					ckpt_last_error());
				goto out;
			}
			for (k = 0; k < got; k++)
				h = (h ^ (unsigned char)buf[k]) * 1099511628211ull;
			off += got;
		}
		printf("%s\t%s\t", path, e.kind == CKPT_KIND_BYTES ? "bytes" :
		       ckpt_dtype_name((enum ckpt_dtype)e.dtype));
		print_dims(e.shape, e.ndim);
		printf("\t");
		print_dims(e.offsets, e.ndim);
		printf("\t%" PRIu64 "\t%016" PRIx64 "\n", e.size, h);
	}
	status = 0;
out:
	free(buf);
	ckpt_scratch_free(s);
	ckpt_view_free(v);
	ckpt_meta_free(m);
	return status;
}
