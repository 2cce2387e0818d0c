/* SPDX-License-Identifier: MIT */
#include "torch/torch_globals.h"

#define DCP "torch.distributed.*"

#define DTYPES(X)							\
	X("float64", CKPT_F64) X("double", CKPT_F64)			\
	X("float32", CKPT_F32) X("float", CKPT_F32)			\
	X("float16", CKPT_F16) X("half", CKPT_F16)			\
	X("bfloat16", CKPT_BF16)					\
	X("float8_e4m3fn", CKPT_F8E4M3) X("float8_e5m2", CKPT_F8E5M2)	\
	X("int64", CKPT_I64) X("long", CKPT_I64)			\
	X("int32", CKPT_I32) X("int", CKPT_I32)				\
	X("int16", CKPT_I16) X("short", CKPT_I16)			\
	X("int8", CKPT_I8) X("uint8", CKPT_U8) X("bool", CKPT_BOOL)

#define STORAGES(X)							\
	X("DoubleStorage", CKPT_F64) X("FloatStorage", CKPT_F32)	\
	X("HalfStorage", CKPT_F16) X("BFloat16Storage", CKPT_BF16)	\
	X("LongStorage", CKPT_I64) X("IntStorage", CKPT_I32)		\
	X("ShortStorage", CKPT_I16) X("CharStorage", CKPT_I8)		\
	X("ByteStorage", CKPT_U8) X("BoolStorage", CKPT_BOOL)		\
	X("Float8_e4m3fnStorage", CKPT_F8E4M3)				\
	X("Float8_e5m2Storage", CKPT_F8E5M2)

#define DTYPE_ENTRY(n, dt) { "torch", n, TG_DTYPE + dt },
#define STORAGE_ENTRY(n, dt) { "torch", n, TG_STORAGE + dt },

const struct pk_global torch_metadata_globals[] = {
	{ DCP, "Metadata", TG_METADATA },
	{ DCP, "TensorStorageMetadata", TG_TENSOR_MD },
	{ DCP, "ChunkStorageMetadata", TG_CHUNK_MD },
	{ DCP, "BytesStorageMetadata", TG_BYTES_MD },
	{ DCP, "TensorProperties", TG_PROPS },
	{ DCP, "MetadataIndex", TG_INDEX },
	{ DCP, "_StorageInfo", TG_STORAGE_INFO },
	{ DCP, "StorageMeta", TG_STORAGE_META },
	{ DCP, "MEM_FORMAT_ENCODING", TG_MEM_FORMAT },
	{ DCP, "_MEM_FORMAT_ENCODING", TG_MEM_FORMAT },
	/* Megatron-Core (2025+) pickles its SavePlans into Metadata as
	 * all_local_plans; the schema walk never looks at them. */
	{ DCP, "SavePlan", TG_INERT },
	{ DCP, "WriteItem", TG_INERT },
	{ DCP, "WriteItemType", TG_INERT },
	{ DCP, "TensorWriteData", TG_INERT },
	{ DCP, "BytesIOWriteData", TG_INERT },
	{ "torch", "Size", TG_SIZE },
	{ "torch.serialization", "_get_layout", TG_LAYOUT },
	{ "builtins", "getattr", TG_GETATTR },
	{ "__builtin__", "getattr", TG_GETATTR },	/* protocol <= 2 */
	{ "pathlib", "PosixPath", TG_PATH },
	{ "pathlib._local", "PosixPath", TG_PATH },
	{ "collections", "OrderedDict", TG_ORDERED_DICT },
	DTYPES(DTYPE_ENTRY)
};
const size_t torch_metadata_nglobals =
	sizeof(torch_metadata_globals) / sizeof(torch_metadata_globals[0]);

const struct pk_global torch_datapkl_globals[] = {
	{ "torch._utils", "_rebuild_tensor_v2", TG_REBUILD_TENSOR },
	{ "torch._utils", "_rebuild_tensor_v3", TG_REBUILD_TENSOR_V3 },
	{ "torch.storage", "UntypedStorage", TG_UNTYPED_STORAGE },
	{ "collections", "OrderedDict", TG_ORDERED_DICT },
	STORAGES(STORAGE_ENTRY)
	DTYPES(DTYPE_ENTRY)
};
const size_t torch_datapkl_nglobals =
	sizeof(torch_datapkl_globals) / sizeof(torch_datapkl_globals[0]);
