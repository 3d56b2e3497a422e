#include "tessera/checkpoint/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "codec.h"
#include "fs.h"
#include "utf8.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::ordered_json;

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

Json body_json(const Manifest& m) {
  Json j;
  j["format"] = kManifestFormat;
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

Result<Manifest> read_manifest(const std::string& root, int64_t step) {
  const std::string rel = step_dir_name(step) + "/manifest.json";
  auto text = fs::read_in_root(root, rel, kMaxManifestBytes);
  if (!text.ok()) return text.status();
  TSR_ASSIGN_OR_RETURN(Manifest m, parse_manifest(*text, "'" + rel + "'"));
  if (m.step != step) {
    return data_loss("'" + rel + "' describes step " + std::to_string(m.step));
  }
  return m;
}

Result<int64_t> read_latest(const std::string& root) {
  const std::string shown = fs::join(root, "latest");
  struct stat st;
  if (::lstat(shown.c_str(), &st) != 0 && errno == ENOENT) {
    return not_found("no 'latest' in '" + root + "'");
  }
  auto read = fs::read_in_root(root, "latest", kMaxLatestBytes);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kNotFound) return read.status();
    return data_loss("'" + shown + "' is not a step name: " + read.status().message());
  }
  std::string text = std::move(*read);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const std::string prefix = "step-";
  if (text.rfind(prefix, 0) != 0 || text.size() == prefix.size() ||
      text.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return data_loss("'" + shown + "' is malformed: '" + escaped(text) + "'");
  }
  // from_chars: a 20-digit step must be an error naming the file, not an out_of_range throw.
  int64_t step = 0;
  const char* first = text.data() + prefix.size();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) {
    return data_loss("'" + shown + "' names step '" + std::string(first, last) +
                     "', which is out of range");
  }
  return step;
}

Result<int64_t> read_latest_committed(const std::string& root) {
  TSR_ASSIGN_OR_RETURN(const int64_t step, read_latest(root));
  const std::string rel = step_dir_name(step) + "/manifest.json";
  auto manifest = fs::resolve_in_root(root, rel);
  if (!manifest.ok()) return manifest.status().with_context("'" + fs::join(root, "latest") + "'");
  if (!manifest->open().ok()) {
    return data_loss("'" + fs::join(root, "latest") + "' names " + step_dir_name(step) +
                     ", which has no " + rel + " (a `latest` naming no checkpoint)");
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
    // Inside the root before anything is stat()ed: the error must not tell an outside file's size.
    auto name = fs::resolve_in_root(root, f.name);
    if (!name.ok()) return name.status().with_context("step " + std::to_string(manifest.step));
    auto file = name->open();
    if (!file.ok()) {
      return data_loss("step " + std::to_string(manifest.step) + ": shard '" + f.name +
                       "' is missing (" + file.status().message() + ")");
    }
    const uint64_t size = file->size();
    if (size != f.size) {
      return data_loss("shard '" + f.name + "' has " + std::to_string(size) +
                       " bytes, manifest says " + std::to_string(f.size) +
                       (size < f.size ? " (truncated)" : ""));
    }
  }
  TSR_ASSIGN_OR_RETURN(const fs::NameInRoot step_dir, fs::resolve_in_root(root, dir));
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> names, step_dir.list());
  for (const auto& name : names) {
    if (name == "manifest.json") continue;
    if (!listed.count(dir + "/" + name)) {
      return data_loss("unexpected file '" + dir + "/" + escaped(name) +
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
        TSR_RETURN_IF_ERROR(reader.read(s.chunks[i], &buffer,
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
      TSR_RETURN_IF_ERROR(reader.read(b.chunks[i], &buffer,
                                      "blob '" + b.name + "' of rank " + std::to_string(b.rank) +
                                          " chunk " + std::to_string(i)));
    }
  }
  return check_file_digests(manifest);
}

}  // namespace tessera::ckpt
