// POSIX file helpers for the checkpointer: whole writes, fsync of files and directories, atomic
// replacement, listing and removal. Errors name the path and carry strerror. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::ckpt::fs {

std::string join(std::string_view a, std::string_view b);
// An errno as a Status: ENOSPC -> RESOURCE_EXHAUSTED, ENOENT -> NOT_FOUND, else INTERNAL/DATA_LOSS.
Status errno_status(int err, std::string_view what, std::string_view path);

Status make_dirs(const std::string& path);
Status fsync_path(const std::string& path);  // file or directory
Status fsync_parent(const std::string& path);
// Writes `bytes` to `path` (created or truncated), fsynced when `sync`.
Status write_file(const std::string& path, std::string_view bytes, bool sync);
Result<std::string> read_file(const std::string& path);
// Writes `path`.tmp, fsyncs, renames over `path`, fsyncs the parent. `before_rename` runs between.
// A failure before the rename removes `path`.tmp. *renamed (when given) says whether `path` was
// replaced: an error with *renamed true means the new content is visible but maybe not durable.
Status replace_file(const std::string& path, std::string_view bytes, bool sync,
                    const std::function<Status()>& before_rename = {}, bool* renamed = nullptr);
Status rename_path(const std::string& from, const std::string& to);
Status remove_all(const std::string& path);  // rm -rf; a missing path is OK
bool exists(const std::string& path);
Result<uint64_t> file_size(const std::string& path);
// Names of the entries of a directory (no . and ..).
Result<std::vector<std::string>> list_dir(const std::string& path);

// An open file read with pread.
class ReadFile {
 public:
  static Result<ReadFile> open(const std::string& path);
  ReadFile() = default;
  ~ReadFile();
  ReadFile(ReadFile&& other) noexcept;
  ReadFile& operator=(ReadFile&& other) noexcept;
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  // Exactly `bytes` at `offset`; DATA_LOSS when the file is shorter.
  Status read_at(uint64_t offset, void* dst, size_t bytes) const;

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace tessera::ckpt::fs
