#include "tessera/checkpoint/manifest.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "codec.h"
#include "fs.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::ordered_json;
// 2: a file's checksum is over its chunks' checksums (codec::FileDigest), not its bytes.
constexpr const char* kFormat = "tessera-checkpoint-2";

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
      return data_loss(std::string(where) + ": bad checksum '" + text + "'");
  }
  return v;
}

Json location_json(const ChunkLocation& l) {
  Json j = {{"file", l.file},
            {"offset", l.offset},
            {"stored", l.stored},
            {"checksum", hex64(l.checksum)}};
  if (!l.compressed) j["zstd"] = false;
  return j;
}

Json chunk_json(const ChunkRecord& c) {
  Json j = {{"enc", c.enc}, {"raw", c.raw}, {"hash", hex64(c.hash)}};
  j["data"] = location_json(c.data);
  if (c.base) j["base"] = location_json(*c.base);
  return j;
}

ChunkLocation location_from(const Json& j) {
  return {j.at("file").get<std::string>(), j.at("offset").get<uint64_t>(),
          j.at("stored").get<uint64_t>(), 0, j.value("zstd", true)};
}

Status chunks_from(const Json& j, std::vector<ChunkRecord>* out, std::string_view where) {
  for (const Json& c : j) {
    ChunkRecord r;
    r.enc = c.at("enc").get<std::string>();
    r.raw = c.at("raw").get<uint64_t>();
    TSR_ASSIGN_OR_RETURN(r.hash, parse_hex64(c.at("hash").get<std::string>(), where));
    r.data = location_from(c.at("data"));
    TSR_ASSIGN_OR_RETURN(r.data.checksum,
                         parse_hex64(c.at("data").at("checksum").get<std::string>(), where));
    if (c.contains("base")) {
      r.base = location_from(c.at("base"));
      TSR_ASSIGN_OR_RETURN(r.base->checksum,
                           parse_hex64(c.at("base").at("checksum").get<std::string>(), where));
    }
    out->push_back(std::move(r));
  }
  return Status();
}

Json body_json(const Manifest& m) {
  Json j;
  j["format"] = kFormat;
  j["step"] = m.step;
  j["kind"] = m.delta ? "delta" : "full";
  j["base_step"] = m.base_step;
  j["world_size"] = m.world_size;
  j["created_unix_s"] = m.created_unix_s;
  j["layout"] = m.layout;
  j["metadata"] = Json::object();
  for (const auto& [k, v] : m.metadata) j["metadata"][k] = v;
  j["files"] = Json::array();
  for (const auto& f : m.files) {
    j["files"].push_back({{"name", f.name}, {"size", f.size}, {"checksum", hex64(f.checksum)}});
  }
  j["tensors"] = Json::array();
  for (const auto& t : m.tensors) {
    Json tj = {{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"shards", Json::array()}};
    for (const auto& s : t.shards) {
      Json sj = {{"rank", s.rank},
                 {"offset", s.slice.offset},
                 {"len", s.slice.len},
                 {"chunk_bytes", s.chunk_bytes},
                 {"chunks", Json::array()}};
      for (const auto& c : s.chunks) sj["chunks"].push_back(chunk_json(c));
      tj["shards"].push_back(std::move(sj));
    }
    if (t.placement) {
      tj["placement"] = {{"tp_dim", t.placement->tp_dim},
                         {"zero_dim", t.placement->zero_dim},
                         {"zero_stage", t.placement->zero_stage},
                         {"layer", t.placement->layer}};
      if (t.placement->expert_dim >= 0) tj["placement"]["expert_dim"] = t.placement->expert_dim;
    }
    j["tensors"].push_back(std::move(tj));
  }
  j["blobs"] = Json::array();
  for (const auto& b : m.blobs) {
    Json bj = {{"name", b.name},
               {"rank", b.rank},
               {"replicated", b.replicated},
               {"size", b.size},
               {"chunks", Json::array()}};
    for (const auto& c : b.chunks) bj["chunks"].push_back(chunk_json(c));
    j["blobs"].push_back(std::move(bj));
  }
  return j;
}

}  // namespace

std::string hex64(uint64_t value) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = kHex[value & 15];
  return out;
}

std::string step_dir_name(int64_t step) {
  return "step-" + std::to_string(step);
}

uint64_t Manifest::bytes_stored() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

uint64_t Manifest::bytes_raw() const {
  uint64_t n = 0;
  for (const auto& t : tensors) {
    for (const auto& s : t.shards) {
      for (const auto& c : s.chunks) n += c.raw;
    }
  }
  for (const auto& b : blobs) n += b.size;
  return n;
}

const TensorRecord* Manifest::find_tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string manifest_to_json(const Manifest& manifest) {
  Json j = body_json(manifest);
  const std::string body = j.dump();
  j["manifest_checksum"] = hex64(codec::xxh3(body.data(), body.size()));
  return j.dump(1) + "\n";
}

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
    if (j.at("format").get<std::string>() != kFormat) {
      return data_loss(w + ": unknown format '" + j.at("format").get<std::string>() + "'");
    }
    m.step = j.at("step").get<int64_t>();
    m.delta = j.at("kind").get<std::string>() == "delta";
    m.base_step = j.at("base_step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.created_unix_s = j.at("created_unix_s").get<int64_t>();
    m.layout = j.at("layout").get<std::string>();
    for (const auto& [k, v] : j.at("metadata").items()) m.metadata[k] = v.get<std::string>();
    for (const Json& f : j.at("files")) {
      FileRecord r{f.at("name").get<std::string>(), f.at("size").get<uint64_t>(), 0};
      TSR_ASSIGN_OR_RETURN(r.checksum, parse_hex64(f.at("checksum").get<std::string>(), w));
      m.files.push_back(std::move(r));
    }
    for (const Json& t : j.at("tensors")) {
      TensorRecord r;
      r.name = t.at("name").get<std::string>();
      r.dtype = t.at("dtype").get<std::string>();
      r.shape = t.at("shape").get<std::vector<int64_t>>();
      for (const Json& s : t.at("shards")) {
        ShardRecord sr;
        sr.rank = s.at("rank").get<int>();
        sr.slice.offset = s.at("offset").get<std::vector<int64_t>>();
        sr.slice.len = s.at("len").get<std::vector<int64_t>>();
        sr.chunk_bytes = s.at("chunk_bytes").get<uint64_t>();
        TSR_RETURN_IF_ERROR(chunks_from(s.at("chunks"), &sr.chunks, w));
        if (sr.slice.offset.size() != r.shape.size() || sr.slice.len.size() != r.shape.size() ||
            sr.chunk_bytes == 0) {
          return data_loss(w + ": tensor '" + r.name + "': malformed shard");
        }
        if (sr.chunk_bytes > kMaxChunkBytes) {
          return data_loss(w + ": tensor '" + r.name + "': shard of rank " +
                           std::to_string(sr.rank) + " has chunk_bytes " +
                           std::to_string(sr.chunk_bytes) + ", above the limit of " +
                           std::to_string(kMaxChunkBytes));
        }
        r.shards.push_back(std::move(sr));
      }
      if (t.contains("placement")) {
        const Json& p = t.at("placement");
        r.placement = Placement{p.at("tp_dim").get<int>(), p.at("zero_dim").get<int>(),
                                p.at("zero_stage").get<int>(), p.at("layer").get<int>(),
                                p.value("expert_dim", -1)};
      }
      m.tensors.push_back(std::move(r));
    }
    for (const Json& b : j.at("blobs")) {
      BlobRecord r;
      r.name = b.at("name").get<std::string>();
      r.rank = b.at("rank").get<int>();
      r.replicated = b.at("replicated").get<bool>();
      r.size = b.at("size").get<uint64_t>();
      TSR_RETURN_IF_ERROR(chunks_from(b.at("chunks"), &r.chunks, w));
      m.blobs.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    return data_loss(w + ": malformed manifest: " + e.what());
  }
  return m;
}

Result<Manifest> read_manifest(const std::string& root, int64_t step) {
  const std::string rel = step_dir_name(step) + "/manifest.json";
  auto text = fs::read_file(fs::join(root, rel));
  if (!text.ok()) return text.status();
  TSR_ASSIGN_OR_RETURN(Manifest m, parse_manifest(*text, "'" + rel + "'"));
  if (m.step != step) {
    return data_loss("'" + rel + "' describes step " + std::to_string(m.step));
  }
  return m;
}

Result<int64_t> read_latest(const std::string& root) {
  const std::string path = fs::join(root, "latest");
  if (!fs::exists(path)) return not_found("no 'latest' in '" + root + "'");
  TSR_ASSIGN_OR_RETURN(std::string text, fs::read_file(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const std::string prefix = "step-";
  if (text.rfind(prefix, 0) != 0 || text.size() == prefix.size() ||
      text.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return data_loss("'" + path + "' is malformed: '" + text + "'");
  }
  // from_chars: a 20-digit step must be an error naming the file, not an out_of_range throw.
  int64_t step = 0;
  const char* first = text.data() + prefix.size();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) {
    return data_loss("'" + path + "' names step '" + std::string(first, last) +
                     "', which is out of range");
  }
  return step;
}

Result<std::vector<StepInfo>> list_steps(const std::string& root) {
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> names, fs::list_dir(root));
  std::vector<StepInfo> out;
  for (const auto& name : names) {
    if (name.rfind("step-", 0) != 0) continue;
    std::string digits = name.substr(5);
    bool tmp = false;
    if (digits.size() > 4 && digits.compare(digits.size() - 4, 4, ".tmp") == 0) {
      digits.resize(digits.size() - 4);
      tmp = true;
    }
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    int64_t step = 0;
    if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc()) {
      continue;  // not a step directory of ours (cannot happen with <= 18 digits)
    }
    out.push_back(StepInfo{step, !tmp, name});
  }
  std::sort(out.begin(), out.end(), [](const StepInfo& a, const StepInfo& b) {
    return a.step != b.step ? a.step < b.step : a.committed > b.committed;
  });
  return out;
}

Status check_files(const std::string& root, const Manifest& manifest) {
  const std::string dir = step_dir_name(manifest.step);
  std::set<std::string> listed;
  for (const auto& f : manifest.files) {
    listed.insert(f.name);
    auto size = fs::file_size(fs::join(root, f.name));
    if (!size.ok()) {
      return data_loss("step " + std::to_string(manifest.step) + ": shard '" + f.name +
                       "' is missing (" + size.status().message() + ")");
    }
    if (*size != f.size) {
      return data_loss("shard '" + f.name + "' has " + std::to_string(*size) +
                       " bytes, manifest says " + std::to_string(f.size) +
                       (*size < f.size ? " (truncated)" : ""));
    }
  }
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> names, fs::list_dir(fs::join(root, dir)));
  for (const auto& name : names) {
    if (name == "manifest.json") continue;
    if (!listed.count(dir + "/" + name)) {
      return data_loss("unexpected file '" + dir + "/" + name +
                       "' not listed in the manifest (stray file from another save?)");
    }
  }
  return Status();
}

// Each of this step's files must be tiled exactly by the chunks stored in it (so the verified
// chunks covered every byte) and its recorded checksum must be the digest of their checksums.
static Status check_file_digests(const Manifest& manifest) {
  // file -> its chunks (an empty chunk shares its offset with the next one, hence not a map)
  std::map<std::string, std::vector<const ChunkLocation*>> in_file;
  auto note = [&](const ChunkLocation& l) { in_file[l.file].push_back(&l); };
  for (const auto& t : manifest.tensors) {
    for (const auto& s : t.shards) {
      for (const auto& c : s.chunks) note(c.data);
    }
  }
  for (const auto& b : manifest.blobs) {
    for (const auto& c : b.chunks) note(c.data);
  }
  for (const auto& f : manifest.files) {
    codec::FileDigest digest;
    uint64_t end = 0;
    std::vector<const ChunkLocation*>& chunks = in_file[f.name];
    std::stable_sort(chunks.begin(), chunks.end(), [](const auto* a, const auto* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->stored < b->stored;
    });
    for (const ChunkLocation* where : chunks) {
      const uint64_t offset = where->offset;
      if (offset != end) {
        return data_loss("shard '" + f.name + "': bytes [" + std::to_string(end) + ", " +
                         std::to_string(offset) + ") belong to no chunk of the manifest");
      }
      digest.add_chunk(where->checksum);
      end = offset + where->stored;
    }
    if (end != f.size) {
      return data_loss("shard '" + f.name + "': its chunks end at byte " + std::to_string(end) +
                       ", the file has " + std::to_string(f.size));
    }
    if (digest.digest() != f.checksum) {
      return data_loss("shard '" + f.name +
                       "': whole-file checksum mismatch (the manifest's chunk table differs from "
                       "what was written)");
    }
  }
  return Status();
}

Status verify_checkpoint(const std::string& root, const Manifest& manifest,
                         const std::function<void(uint64_t, uint64_t)>& progress) {
  TSR_RETURN_IF_ERROR(check_files(root, manifest));
  uint64_t total = 0, done = 0;
  for (const auto& t : manifest.tensors) {
    for (const auto& s : t.shards) {
      for (const auto& c : s.chunks) total += c.raw;
    }
  }
  codec::ChunkReader reader(root);
  std::string buffer;
  for (const auto& t : manifest.tensors) {
    for (const auto& s : t.shards) {
      for (size_t i = 0; i < s.chunks.size(); ++i) {
        buffer.resize(s.chunks[i].raw);
        TSR_RETURN_IF_ERROR(reader.read(s.chunks[i], buffer.data(),
                                        "tensor '" + t.name + "' shard of rank " +
                                            std::to_string(s.rank) + " chunk " +
                                            std::to_string(i)));
        done += s.chunks[i].raw;
        if (progress) progress(done, total);
      }
    }
  }
  for (const auto& b : manifest.blobs) {
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      buffer.resize(b.chunks[i].raw);
      TSR_RETURN_IF_ERROR(reader.read(b.chunks[i], buffer.data(),
                                      "blob '" + b.name + "' of rank " + std::to_string(b.rank) +
                                          " chunk " + std::to_string(i)));
    }
  }
  return check_file_digests(manifest);
}

}  // namespace tessera::ckpt
