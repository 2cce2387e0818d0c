/* SPDX-License-Identifier: MIT */
/*
 * The globals a torch distributed checkpoint may name, and nothing else:
 * the DCP dataclasses (matched by class name under torch.distributed, so
 * 1.13's torch.distributed._shard.checkpoint and 2.x's
 * torch.distributed.checkpoint both load), torch.Size, dtypes, storage
 * classes and the few helpers their pickles call.
 */
#ifndef CKPT_TORCH_GLOBALS_H
#define CKPT_TORCH_GLOBALS_H

#include <stddef.h>

#include "common/dtype.h"
#include "torch/pickle.h"

enum torch_global {
	TG_METADATA,
	TG_TENSOR_MD,		/* TensorStorageMetadata */
	TG_CHUNK_MD,		/* ChunkStorageMetadata */
	TG_BYTES_MD,		/* BytesStorageMetadata */
	TG_PROPS,		/* TensorProperties */
	TG_INDEX,		/* MetadataIndex */
	TG_STORAGE_INFO,	/* _StorageInfo */
	TG_STORAGE_META,	/* StorageMeta (2.4+) */
	TG_MEM_FORMAT,		/* (_)MEM_FORMAT_ENCODING */
	TG_SIZE,		/* torch.Size */
	TG_LAYOUT,		/* torch.serialization._get_layout */
	TG_GETATTR,		/* builtins.getattr (enum members) */
	TG_PATH,		/* pathlib.PosixPath (StorageMeta) */
	TG_ORDERED_DICT,	/* collections.OrderedDict */
	TG_REBUILD_TENSOR,	/* torch._utils._rebuild_tensor_v2 */
	TG_REBUILD_TENSOR_V3,	/* torch._utils._rebuild_tensor_v3 (torch 2.1+
				 * for float8: an UntypedStorage and a dtype) */
	TG_UNTYPED_STORAGE,	/* torch.storage.UntypedStorage */
	TG_INERT,		/* planner dataclasses some writers keep in
				 * Metadata (Megatron-Core's all_local_plans:
				 * SavePlan, WriteItem, ...): built as inert
				 * nodes, never interpreted */
	TG_DTYPE = 100,		/* + enum ckpt_dtype: torch.float32 ... */
	TG_STORAGE = 200,	/* + enum ckpt_dtype: torch.FloatStorage ... */
};

/* The table for .metadata and the one for a blob's data.pkl. */
extern const struct pk_global torch_metadata_globals[];
extern const size_t torch_metadata_nglobals;
extern const struct pk_global torch_datapkl_globals[];
extern const size_t torch_datapkl_nglobals;

#endif
