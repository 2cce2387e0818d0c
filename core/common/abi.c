/* SPDX-License-Identifier: MIT */
/*
 * The binary interface a binding checks at load (ckptfs.h): the ABI
 * version, and the size and field offsets of every struct of the public
 * header.  tests/python/test_abi.py checks that this table names every
 * struct and field the header declares.
 */
#include <stddef.h>
#include <string.h>

#include "ckptfs.h"

struct field {
	const char *name;
	size_t offset;
};

struct abi_struct {
	const char *name;
	size_t size;
	const struct field *fields;
};

#define F(s, f) { #f, offsetof(struct s, f) }
#define S(s, fields) { #s, sizeof(struct s), fields }

static const struct field error_fields[] = {
	F(ckpt_error, code),
	F(ckpt_error, offset),
	F(ckpt_error, path),
	F(ckpt_error, key),
	F(ckpt_error, message),
	{ NULL, 0 }
};

static const struct field s3_opts_fields[] = {
	F(ckpt_s3_opts, endpoint),
	F(ckpt_s3_opts, region),
	F(ckpt_s3_opts, profile),
	F(ckpt_s3_opts, access_key),
	F(ckpt_s3_opts, secret_key),
	F(ckpt_s3_opts, session_token),
	F(ckpt_s3_opts, parallel),
	F(ckpt_s3_opts, part_bytes),
	F(ckpt_s3_opts, merge_gap),
	F(ckpt_s3_opts, retries),
	F(ckpt_s3_opts, timeout_ms),
	F(ckpt_s3_opts, credentials_file),
	F(ckpt_s3_opts, config_file),
	F(ckpt_s3_opts, no_sign_request),
	F(ckpt_s3_opts, connect_timeout_ms),
	F(ckpt_s3_opts, low_speed_limit),
	F(ckpt_s3_opts, low_speed_time),
	F(ckpt_s3_opts, open_deadline_ms),
	F(ckpt_s3_opts, read_deadline_ms),
	F(ckpt_s3_opts, list_max_keys),
	F(ckpt_s3_opts, ca_bundle),
	F(ckpt_s3_opts, addressing_style),
	F(ckpt_s3_opts, az_endpoint),
	F(ckpt_s3_opts, az_anonymous),
	{ NULL, 0 }
};

static const struct field open_opts_fields[] = {
	F(ckpt_open_opts, index),
	F(ckpt_open_opts, follow_symlinks),
	F(ckpt_open_opts, cache_bytes),
	F(ckpt_open_opts, s3),
	F(ckpt_open_opts, index_cache),
	{ NULL, 0 }
};

static const struct field meta_info_fields[] = {
	F(ckpt_meta_info, dir),
	F(ckpt_meta_info, meta_path),
	F(ckpt_meta_info, format),
	F(ckpt_meta_info, version),
	F(ckpt_meta_info, origin),
	F(ckpt_meta_info, nkeys),
	F(ckpt_meta_info, nchunks),
	F(ckpt_meta_info, nfiles),
	F(ckpt_meta_info, mtime_sec),
	F(ckpt_meta_info, mtime_nsec),
	{ NULL, 0 }
};

static const struct field key_info_fields[] = {
	F(ckpt_key_info, fqn),
	F(ckpt_key_info, kind),
	F(ckpt_key_info, dtype),
	F(ckpt_key_info, ndim),
	F(ckpt_key_info, shape),
	F(ckpt_key_info, numel),
	F(ckpt_key_info, nbytes),
	F(ckpt_key_info, chunk_first),
	F(ckpt_key_info, nchunks),
	{ NULL, 0 }
};

static const struct field chunk_info_fields[] = {
	F(ckpt_chunk_info, key),
	F(ckpt_chunk_info, ndim),
	F(ckpt_chunk_info, offsets),
	F(ckpt_chunk_info, sizes),
	F(ckpt_chunk_info, has_record),
	F(ckpt_chunk_info, file),
	F(ckpt_chunk_info, path),
	F(ckpt_chunk_info, foff),
	F(ckpt_chunk_info, len),
	F(ckpt_chunk_info, strided),
	F(ckpt_chunk_info, checksum),
	F(ckpt_chunk_info, stored_checksum),
	F(ckpt_chunk_info, transforms),
	F(ckpt_chunk_info, decoded_len),
	{ NULL, 0 }
};

static const struct field view_opts_fields[] = {
	F(ckpt_view_opts, world),
	F(ckpt_view_opts, rank),
	F(ckpt_view_opts, ranks),
	F(ckpt_view_opts, nranks),
	F(ckpt_view_opts, prefix),
	F(ckpt_view_opts, layout),
	F(ckpt_view_opts, dtype),
	F(ckpt_view_opts, verify),
	F(ckpt_view_opts, npy),
	F(ckpt_view_opts, meta_dir),
	F(ckpt_view_opts, source),
	F(ckpt_view_opts, layout_path),
	F(ckpt_view_opts, report),
	F(ckpt_view_opts, report_ctx),
	{ NULL, 0 }
};

static const struct field view_info_fields[] = {
	F(ckpt_view_info, world),
	F(ckpt_view_info, nslots),
	F(ckpt_view_info, multi),
	F(ckpt_view_info, nnodes),
	F(ckpt_view_info, nfiles),
	F(ckpt_view_info, total_bytes),
	F(ckpt_view_info, npy),
	F(ckpt_view_info, dtype),
	{ NULL, 0 }
};

static const struct field node_info_fields[] = {
	F(ckpt_node_info, type),
	F(ckpt_node_info, parent),
	F(ckpt_node_info, name),
	F(ckpt_node_info, name_len),
	F(ckpt_node_info, key),
	F(ckpt_node_info, nchildren),
	F(ckpt_node_info, nsubdirs),
	{ NULL, 0 }
};

static const struct field entry_info_fields[] = {
	F(ckpt_entry_info, key),
	F(ckpt_entry_info, fqn),
	F(ckpt_entry_info, kind),
	F(ckpt_entry_info, dtype),
	F(ckpt_entry_info, saved_dtype),
	F(ckpt_entry_info, ndim),
	F(ckpt_entry_info, shape),
	F(ckpt_entry_info, global_shape),
	F(ckpt_entry_info, offsets),
	F(ckpt_entry_info, size),
	F(ckpt_entry_info, header),
	F(ckpt_entry_info, nchunks),
	{ NULL, 0 }
};

static const struct field read_run_fields[] = {
	F(ckpt_read_run, chunk),
	F(ckpt_read_run, file),
	F(ckpt_read_run, foff),
	F(ckpt_read_run, len),
	F(ckpt_read_run, decoded),
	{ NULL, 0 }
};

static const struct field read_req_fields[] = {
	F(ckpt_read_req, slot),
	F(ckpt_read_req, node),
	F(ckpt_read_req, off),
	F(ckpt_read_req, len),
	F(ckpt_read_req, dst),
	{ NULL, 0 }
};

static const struct field box_req_fields[] = {
	F(ckpt_box_req, key),
	F(ckpt_box_req, off),
	F(ckpt_box_req, size),
	F(ckpt_box_req, dst),
	{ NULL, 0 }
};

static const struct field batch_opts_fields[] = {
	F(ckpt_batch_opts, threads),
	F(ckpt_batch_opts, cancel),
	{ NULL, 0 }
};

static const struct field io_stats_fields[] = {
	F(ckpt_io_stats, bytes_fetched),
	F(ckpt_io_stats, bytes_delivered),
	F(ckpt_io_stats, requests),
	F(ckpt_io_stats, retries),
	F(ckpt_io_stats, connects),
	F(ckpt_io_stats, open_gets),
	F(ckpt_io_stats, open_heads),
	F(ckpt_io_stats, open_lists),
	F(ckpt_io_stats, open_bytes_fetched),
	F(ckpt_io_stats, open_bytes_delivered),
	F(ckpt_io_stats, read_gets),
	F(ckpt_io_stats, read_heads),
	F(ckpt_io_stats, read_lists),
	F(ckpt_io_stats, read_bytes_fetched),
	F(ckpt_io_stats, read_bytes_delivered),
	F(ckpt_io_stats, side_bytes_peak),
	{ NULL, 0 }
};

static const struct abi_struct structs[] = {
	S(ckpt_error, error_fields),
	S(ckpt_s3_opts, s3_opts_fields),
	S(ckpt_open_opts, open_opts_fields),
	S(ckpt_io_stats, io_stats_fields),
	S(ckpt_meta_info, meta_info_fields),
	S(ckpt_key_info, key_info_fields),
	S(ckpt_chunk_info, chunk_info_fields),
	S(ckpt_view_opts, view_opts_fields),
	S(ckpt_view_info, view_info_fields),
	S(ckpt_node_info, node_info_fields),
	S(ckpt_entry_info, entry_info_fields),
	S(ckpt_read_run, read_run_fields),
	S(ckpt_read_req, read_req_fields),
	S(ckpt_box_req, box_req_fields),
	S(ckpt_batch_opts, batch_opts_fields),
};

unsigned ckpt_abi_version(void)
{
	return CKPT_ABI_VERSION;
}

static const struct abi_struct *find(const char *name)
{
	size_t i;

	for (i = 0; name && i < sizeof(structs) / sizeof(structs[0]); i++)
		if (strcmp(structs[i].name, name) == 0)
			return &structs[i];
	return NULL;
}

size_t ckpt_abi_struct_size(const char *name)
{
	const struct abi_struct *s = find(name);

	return s ? s->size : 0;
}

long ckpt_abi_field_offset(const char *name, const char *field)
{
	const struct abi_struct *s = find(name);
	const struct field *f;

	for (f = s ? s->fields : NULL; f && f->name && field; f++)
		if (strcmp(f->name, field) == 0)
			return (long)f->offset;
	return -1;
}
