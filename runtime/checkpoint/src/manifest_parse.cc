// parse_manifest: a manifest is untrusted input (its checksum is no signature), so every value a
// reader sizes memory, loops or opens files by is checked here, naming the field.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "codec.h"
#include "fs.h"
#include "tessera/checkpoint/layout.h"
#include "tessera/checkpoint/manifest.h"
#include "utf8.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::ordered_json;

Result<uint64_t> parse_hex64(const std::string& text, std::string_view where) {
  if (text.empty() || text.size() > 16) return data_loss(std::string(where) + ": bad checksum");
  uint64_t v = 0;
  for (char c : text) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= static_cast<uint64_t>(c - 'a' + 10);
    else
      return data_loss(std::string(where) + ": bad checksum '" + escaped(text) + "'");
  }
  return v;
}

// Integer fields are read range-checked: a float, a string, a negative size or a world_size of
// 2^32 + 1 (which get<int>() would truncate to 1) is an error naming the field, never a value.
Result<int64_t> int_field(const Json& j, const char* key, int64_t lo, int64_t hi,
                          const std::string& where) {
  const Json& v = j.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return data_loss(where + ": field '" + key + "' is " + v.dump().substr(0, 40) +
                     ", must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v.get<int64_t>();
}

Result<uint64_t> uint_field(const Json& j, const char* key, const std::string& where) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned()) {
    return data_loss(where + ": field '" + key + "' is " + v.dump().substr(0, 40) +
                     ", must be an integer >= 0");
  }
  return v.get<uint64_t>();
}

Result<ChunkLocation> location_from(const Json& j, const std::string& where) {
  ChunkLocation l;
  l.file = j.at("file").get<std::string>();
  TSR_RETURN_IF_ERROR(fs::check_relative_name(l.file).with_context(where));
  TSR_ASSIGN_OR_RETURN(l.offset, uint_field(j, "offset", where));
  TSR_ASSIGN_OR_RETURN(l.stored, uint_field(j, "stored", where));
  if (l.offset > UINT64_MAX - l.stored) return data_loss(where + ": offset + stored overflows");
  TSR_ASSIGN_OR_RETURN(l.checksum, parse_hex64(j.at("checksum").get<std::string>(), where));
  l.compressed = j.value("zstd", true);
  return l;
}

// One chunk, its sizes checked before any reader sizes a buffer by them.
Result<ChunkRecord> chunk_from(const Json& c, const std::string& where) {
  ChunkRecord r;
  r.enc = c.at("enc").get<std::string>();
  if (r.enc != "zstd" && r.enc != "ref" && r.enc != "xor") {
    return data_loss(where + ": unknown encoding '" + escaped(r.enc.substr(0, 40)) + "'");
  }
  TSR_ASSIGN_OR_RETURN(r.raw, uint_field(c, "raw", where));
  if (r.raw > kMaxChunkBytes) {
    return data_loss(where + ": field 'raw' is " + std::to_string(r.raw) +
                     ", above the chunk limit of " + std::to_string(kMaxChunkBytes));
  }
  TSR_ASSIGN_OR_RETURN(r.hash, parse_hex64(c.at("hash").get<std::string>(), where));
  TSR_ASSIGN_OR_RETURN(r.data, location_from(c.at("data"), where + " data"));
  if (c.contains("base")) {
    TSR_ASSIGN_OR_RETURN(ChunkLocation base, location_from(c.at("base"), where + " base"));
    r.base = std::move(base);
  }
  if ((r.enc == "xor") != r.base.has_value()) {
    return data_loss(where + ": only an 'xor' chunk has (and needs) a 'base'");
  }
  // Stored as is, a chunk's stored bytes are its raw bytes (an "xor" one: the XOR, same size).
  for (const ChunkLocation* l : {&r.data, r.base ? &*r.base : nullptr}) {
    if (l != nullptr && !l->compressed && l->stored != r.raw) {
      return data_loss(where + ": stored without compression in " + std::to_string(l->stored) +
                       " bytes for a raw size of " + std::to_string(r.raw));
    }
  }
  return r;
}

Status chunks_from(const Json& j, std::vector<ChunkRecord>* out, const std::string& where) {
  for (const Json& c : j) {
    TSR_ASSIGN_OR_RETURN(ChunkRecord r,
                         chunk_from(c, where + " chunk " + std::to_string(out->size())));
    out->push_back(std::move(r));
  }
  return Status();
}

// The largest tensor a manifest may describe, in bytes (2^50, a PiB): far above any real one, and
// element counts times the element size stay exact in int64 below it.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 50;
constexpr size_t kMaxDims = 64;

// The shape's element count, each extent >= 0 and the bytes within kMaxTensorBytes.
Result<int64_t> shape_elements(const std::vector<int64_t>& shape, size_t esize,
                               const std::string& where) {
  if (shape.size() > kMaxDims) {
    return data_loss(where + ": field 'shape' has " + std::to_string(shape.size()) +
                     " dims, above the limit of " + std::to_string(kMaxDims));
  }
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return data_loss(where + ": field 'shape' has extent " + std::to_string(shape[d]) +
                       " at dim " + std::to_string(d) + "; extents must be >= 0");
    }
  }
  for (int64_t extent : shape) {
    if (extent == 0) return 0;
  }
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(n, extent, &n) || n > kMaxTensorBytes / int64_t(esize)) {
      return data_loss(where + ": field 'shape' describes more than " +
                       std::to_string(kMaxTensorBytes) + " bytes");
    }
  }
  return n;
}

// A shard: its slice inside the shape and a chunk table that tiles its bytes exactly (the chunk
// count and every raw size follow from the slice and chunk_bytes, as the writers produce them).
Status check_shard(const ShardRecord& s, const std::vector<int64_t>& shape, size_t esize,
                   const std::string& where) {
  if (s.slice.offset.size() != shape.size() || s.slice.len.size() != shape.size()) {
    return data_loss(where + ": fields 'offset' and 'len' must have one entry per dim of 'shape'");
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t off = s.slice.offset[d], len = s.slice.len[d];
    if (off < 0 || len < 0 || off > shape[d] || len > shape[d] - off) {
      return data_loss(where + ": slice " + slice_text(s.slice) + " is outside the shape at dim " +
                       std::to_string(d) + " (extent " + std::to_string(shape[d]) + ")");
    }
  }
  if (s.chunk_bytes == 0 || s.chunk_bytes > kMaxChunkBytes) {
    return data_loss(where + ": field 'chunk_bytes' is " + std::to_string(s.chunk_bytes) +
                     ", must be in 1.." + std::to_string(kMaxChunkBytes));
  }
  const uint64_t bytes = static_cast<uint64_t>(s.slice.elements()) * esize;
  const uint64_t count = (bytes + s.chunk_bytes - 1) / s.chunk_bytes;
  const bool one_empty = bytes == 0 && s.chunks.size() == 1;  // reshard writes one empty chunk
  if (s.chunks.size() != count && !one_empty) {
    return data_loss(where + ": " + std::to_string(s.chunks.size()) + " chunks for " +
                     std::to_string(bytes) + " bytes in chunks of " +
                     std::to_string(s.chunk_bytes));
  }
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    const uint64_t expect =
        std::min<uint64_t>(s.chunk_bytes, bytes - std::min(bytes, i * s.chunk_bytes));
    if (s.chunks[i].raw != expect) {
      return data_loss(where + " chunk " + std::to_string(i) + ": field 'raw' is " +
                       std::to_string(s.chunks[i].raw) + ", the slice needs " +
                       std::to_string(expect));
    }
  }
  return Status();
}

Status check_placement(const Placement& p, size_t dims, const std::string& where) {
  for (const auto& [field, value] :
       {std::pair{"tp_dim", p.tp_dim}, std::pair{"zero_dim", p.zero_dim},
        std::pair{"expert_dim", p.expert_dim}}) {
    if (value < -1 || value >= static_cast<int>(dims)) {
      return data_loss(where + ": placement field '" + field + "' is " + std::to_string(value) +
                       ", must be -1 or a dim of the shape");
    }
  }
  if (p.zero_stage < 0 || p.zero_stage > 3 || p.layer < -1) {
    return data_loss(where +
                     ": placement field 'zero_stage' (0..3) or 'layer' (>= -1) is out "
                     "of range");
  }
  return Status();
}

Result<TensorRecord> tensor_from(const Json& t, int64_t world, const std::string& w) {
  TensorRecord r;
  r.name = t.at("name").get<std::string>();
  const std::string where = w + ": tensor '" + escaped(r.name) + "'";
  r.dtype = t.at("dtype").get<std::string>();
  const auto dtype = hal::parse_dtype(r.dtype);
  if (!dtype) return data_loss(where + ": unknown dtype '" + escaped(r.dtype.substr(0, 40)) + "'");
  const size_t esize = hal::dtype_size(*dtype);
  r.shape = t.at("shape").get<std::vector<int64_t>>();
  TSR_RETURN_IF_ERROR(shape_elements(r.shape, esize, where).status());
  for (const Json& s : t.at("shards")) {
    ShardRecord sr;
    const std::string shard = where + " shard " + std::to_string(r.shards.size());
    TSR_ASSIGN_OR_RETURN(const int64_t rank, int_field(s, "rank", 0, world - 1, shard));
    sr.rank = static_cast<int>(rank);
    sr.slice.offset = s.at("offset").get<std::vector<int64_t>>();
    sr.slice.len = s.at("len").get<std::vector<int64_t>>();
    TSR_ASSIGN_OR_RETURN(sr.chunk_bytes, uint_field(s, "chunk_bytes", shard));
    TSR_RETURN_IF_ERROR(chunks_from(s.at("chunks"), &sr.chunks, shard));
    TSR_RETURN_IF_ERROR(check_shard(sr, r.shape, esize, shard));
    r.shards.push_back(std::move(sr));
  }
  if (t.contains("placement")) {
    const Json& p = t.at("placement");
    // int_field, not get<int>(): 2^32 + 1 would become 1 and pass check_placement.
    auto field = [&](const char* key) { return int_field(p, key, INT_MIN, INT_MAX, where); };
    TSR_ASSIGN_OR_RETURN(const int64_t tp_dim, field("tp_dim"));
    TSR_ASSIGN_OR_RETURN(const int64_t zero_dim, field("zero_dim"));
    TSR_ASSIGN_OR_RETURN(const int64_t zero_stage, field("zero_stage"));
    TSR_ASSIGN_OR_RETURN(const int64_t layer, field("layer"));
    int64_t expert_dim = -1;
    if (p.contains("expert_dim")) {
      TSR_ASSIGN_OR_RETURN(expert_dim, field("expert_dim"));
    }
    r.placement =
        Placement{int(tp_dim), int(zero_dim), int(zero_stage), int(layer), int(expert_dim)};
    TSR_RETURN_IF_ERROR(check_placement(*r.placement, r.shape.size(), where));
  }
  return r;
}

Result<BlobRecord> blob_from(const Json& b, int64_t world, const std::string& w) {
  BlobRecord r;
  r.name = b.at("name").get<std::string>();
  const std::string where = w + ": blob '" + escaped(r.name) + "'";
  TSR_ASSIGN_OR_RETURN(const int64_t rank, int_field(b, "rank", 0, world - 1, where));
  r.rank = static_cast<int>(rank);
  r.replicated = b.at("replicated").get<bool>();
  TSR_ASSIGN_OR_RETURN(r.size, uint_field(b, "size", where));
  TSR_RETURN_IF_ERROR(chunks_from(b.at("chunks"), &r.chunks, where));
  uint64_t sum = 0;
  for (const auto& c : r.chunks) sum += c.raw;  // each <= kMaxChunkBytes: no overflow in practice
  if (sum != r.size) {
    return data_loss(where + ": field 'size' is " + std::to_string(r.size) + ", its chunks hold " +
                     std::to_string(sum) + " bytes");
  }
  return r;
}

}  // namespace

Result<Manifest> parse_manifest(std::string_view text, std::string_view where) {
  const std::string w(where);
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss(w + ": not valid JSON");
  if (!j.contains("manifest_checksum") || !j["manifest_checksum"].is_string()) {
    return data_loss(w + ": no manifest_checksum");
  }
  TSR_ASSIGN_OR_RETURN(uint64_t expected,
                       parse_hex64(j["manifest_checksum"].get<std::string>(), w));
  j.erase("manifest_checksum");
  const std::string body = j.dump();
  if (codec::xxh3(body.data(), body.size()) != expected) {
    return data_loss(w + ": manifest checksum mismatch (the manifest was modified or corrupted)");
  }
  Manifest m;
  try {
    if (j.at("format").get<std::string>() != kManifestFormat) {
      return data_loss(w + ": unknown format '" +
                       escaped(j.at("format").get<std::string>().substr(0, 40)) + "'");
    }
    TSR_ASSIGN_OR_RETURN(m.step, int_field(j, "step", 0, INT64_MAX, w));
    const std::string kind = j.at("kind").get<std::string>();
    if (kind != "full" && kind != "delta") {
      return data_loss(w + ": field 'kind' is '" + escaped(kind.substr(0, 40)) +
                       "', must be 'full' or 'delta'");
    }
    m.delta = kind == "delta";
    // A delta's base is an earlier step; a full one records -1.
    TSR_ASSIGN_OR_RETURN(m.base_step, int_field(j, "base_step", m.delta ? 0 : -1,
                                                m.delta ? m.step - 1 : INT64_MAX, w));
    TSR_ASSIGN_OR_RETURN(const int64_t world, int_field(j, "world_size", 1, kMaxLayoutRanks, w));
    m.world_size = static_cast<int>(world);
    m.created_unix_s = j.at("created_unix_s").get<int64_t>();
    m.layout = j.at("layout").get<std::string>();
    for (const auto& [k, v] : j.at("metadata").items()) m.metadata[k] = v.get<std::string>();
    std::set<std::string> names;
    for (const Json& f : j.at("files")) {
      FileRecord r;
      r.name = f.at("name").get<std::string>();
      TSR_RETURN_IF_ERROR(fs::check_relative_name(r.name).with_context(w + ": files"));
      if (!names.insert(r.name).second) {
        return data_loss(w + ": file '" + escaped(r.name) + "' is listed twice");
      }
      TSR_ASSIGN_OR_RETURN(r.size, uint_field(f, "size", w + ": file '" + escaped(r.name) + "'"));
      TSR_ASSIGN_OR_RETURN(r.checksum, parse_hex64(f.at("checksum").get<std::string>(), w));
      m.files.push_back(std::move(r));
    }
    for (const Json& t : j.at("tensors")) {
      TSR_ASSIGN_OR_RETURN(TensorRecord r, tensor_from(t, world, w));
      m.tensors.push_back(std::move(r));
    }
    for (const Json& b : j.at("blobs")) {
      TSR_ASSIGN_OR_RETURN(BlobRecord r, blob_from(b, world, w));
      m.blobs.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    return data_loss(w + ": malformed manifest: " + e.what());
  }
  return m;
}

}  // namespace tessera::ckpt
