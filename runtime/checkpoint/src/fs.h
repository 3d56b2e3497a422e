// POSIX file helpers for the checkpointer: whole writes, fsync of files and directories, atomic
// replacement, listing and removal. Errors name the path and carry strerror. Thread-safe.
#pragma once

#include <cstddef>
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
// The whole of a regular file of at most `max_bytes` (DATA_LOSS naming the path and both sizes
// when larger: a 50 MB `latest` or a /dev/zero is refused before it is read).
Result<std::string> read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);
// Writes `path`.tmp, fsyncs, renames over `path`, fsyncs the parent. `before_rename` runs between.
// A failure before the rename removes `path`.tmp. *renamed (when given) says whether `path` was
// replaced: an error with *renamed true means the new content is visible but maybe not durable.
Status replace_file(const std::string& path, std::string_view bytes, bool sync,
                    const std::function<Status()>& before_rename = {}, bool* renamed = nullptr);
Status rename_path(const std::string& from, const std::string& to);
Status remove_all(const std::string& path);  // rm -rf; a missing path is OK
bool exists(const std::string& path);
// Names of the entries of a directory (no . and ..).
Result<std::vector<std::string>> list_dir(const std::string& path);

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// An open regular file read with pread. open() refuses other kinds (a FIFO would block the reader
// forever, a character device read without end): it opens with O_NONBLOCK, then fstat()s.
class ReadFile {
 public:
  static Result<ReadFile> open(const std::string& path);
  // A descriptor opened by the caller; `path` names it in errors.
  static Result<ReadFile> adopt(UniqueFd fd, std::string path);
  ReadFile() = default;
  // Exactly `bytes` at `offset`; DATA_LOSS when the file is shorter.
  Status read_at(uint64_t offset, void* dst, size_t bytes) const;
  uint64_t size() const { return size_; }  // at open
  const std::string& path() const { return path_; }

 private:
  UniqueFd fd_;
  uint64_t size_ = 0;
  std::string path_;
};

// Names read from a checkpoint (manifest file names, chunk locations, the step `latest` names) are
// untrusted: anyone can edit a manifest and recompute its checksum. check_relative_name() is the
// lexical rule a manifest's names obey: relative, no empty, "." or ".." component, no NUL, at most
// kMaxNameBytes. resolve_in_root() applies it and then resolves `name` under `root` component by
// component, following symbolic links only while they stay inside `root` (at most 40 of them): a
// name that leads outside is refused by name (DATA_LOSS) without anything outside being touched,
// so the error says nothing about the outside target.
//
// The walk goes through directory descriptors (openat, O_NOFOLLOW), not path strings, and the
// result holds the descriptor of the directory containing the last component: opening it later
// opens that component of that directory with O_NOFOLLOW. A component swapped for a symbolic
// link between the check and the open is refused, never followed (a directory swapped after the
// walk is not even looked at: the walk holds the real one).
inline constexpr size_t kMaxNameBytes = 4096;
Status check_relative_name(std::string_view name);

class NameInRoot {
 public:
  // The resolved path, for messages (and for callers that only need a string).
  const std::string& path() const { return path_; }
  // The file, a regular one (as ReadFile::open), opened relative to the held directory.
  Result<ReadFile> open() const;
  // The entries of the directory it names (no . and ..).
  Result<std::vector<std::string>> list() const;

 private:
  friend Result<NameInRoot> resolve_in_root(const std::string& root, std::string_view name);
  UniqueFd open_leaf(int flags, const char* what, Status* error) const;
  std::string name_, path_, leaf_;
  UniqueFd dir_;
  bool missing_ = false;  // a directory on the way does not exist
};
Result<NameInRoot> resolve_in_root(const std::string& root, std::string_view name);
// resolve_in_root(...).path(): for tests and messages; readers open through NameInRoot.
Result<std::string> path_in_root(const std::string& root, std::string_view name);
// resolve_in_root(...).open().
Result<ReadFile> open_in_root(const std::string& root, std::string_view name);
// The whole of a regular file inside `root`, at most `max_bytes` (as read_file).
Result<std::string> read_in_root(const std::string& root, std::string_view name,
                                 uint64_t max_bytes);

}  // namespace tessera::ckpt::fs
