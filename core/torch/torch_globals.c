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

#define DTYPE_ENTRY(n, dt) { "torch", n, TG_DTYPE + dt, false },
#define STORAGE_ENTRY(n, dt) { "torch", n, TG_STORAGE + dt, false },

const struct pk_global torch_metadata_globals[] = {
	{ DCP, "Metadata", TG_METADATA, false },
	{ DCP, "TensorStorageMetadata", TG_TENSOR_MD, false },
	{ DCP, "ChunkStorageMetadata", TG_CHUNK_MD, false },
	{ DCP, "BytesStorageMetadata", TG_BYTES_MD, false },
	{ DCP, "TensorProperties", TG_PROPS, false },
	{ DCP, "MetadataIndex", TG_INDEX, false },
	{ DCP, "_StorageInfo", TG_STORAGE_INFO, false },
	{ DCP, "StorageMeta", TG_STORAGE_META, false },
	{ DCP, "MEM_FORMAT_ENCODING", TG_MEM_FORMAT, false },
	{ DCP, "_MEM_FORMAT_ENCODING", TG_MEM_FORMAT, false },
	/* Megatron-Core (2025+) pickles its SavePlans into Metadata as
	 * all_local_plans; the schema walk never looks at them. */
	{ DCP, "SavePlan", TG_INERT, false },
	{ DCP, "WriteItem", TG_INERT, false },
	{ DCP, "WriteItemType", TG_INERT, false },
	{ DCP, "TensorWriteData", TG_INERT, false },
	{ DCP, "BytesIOWriteData", TG_INERT, false },
	{ "torch", "Size", TG_SIZE, true },
	{ "torch.serialization", "_get_layout", TG_LAYOUT, false },
	{ "builtins", "getattr", TG_GETATTR, false },
	{ "__builtin__", "getattr", TG_GETATTR, false },	/* protocol <= 2 */
	{ "pathlib", "PosixPath", TG_PATH, false },
	{ "pathlib._local", "PosixPath", TG_PATH, false },
	{ "collections", "OrderedDict", TG_ORDERED_DICT, false },
	DTYPES(DTYPE_ENTRY)
};
const size_t torch_metadata_nglobals =
	sizeof(torch_metadata_globals) / sizeof(torch_metadata_globals[0]);

const struct pk_global torch_datapkl_globals[] = {
	{ "torch._utils", "_rebuild_tensor_v2", TG_REBUILD_TENSOR, false },
	{ "torch._utils", "_rebuild_tensor_v3", TG_REBUILD_TENSOR_V3, false },
	{ "torch.storage", "UntypedStorage", TG_UNTYPED_STORAGE, false },
	{ "collections", "OrderedDict", TG_ORDERED_DICT, false },
	STORAGES(STORAGE_ENTRY)
	DTYPES(DTYPE_ENTRY)
};
const size_t torch_datapkl_nglobals =
	sizeof(torch_datapkl_globals) / sizeof(torch_datapkl_globals[0]);
