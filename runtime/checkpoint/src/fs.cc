#include "fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "utf8.h"

namespace tessera::ckpt::fs {

std::string join(std::string_view a, std::string_view b) {
  std::string out(a);
  if (!out.empty() && out.back() != '/') out += '/';
  out += b;
  return out;
}

Status errno_status(int err, std::string_view what, std::string_view path) {
  std::string message = std::string(what) + " '" + std::string(path) + "': " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return resource_exhausted(std::move(message));
    case ENOENT: return not_found(std::move(message));
    case EACCES:
    case EPERM: return Status(StatusCode::kPermissionDenied, std::move(message));
    default: return internal_error(std::move(message));
  }
}

Status make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return errno_status(ec.value(), "create directory", path);
  return Status();
}

Status fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "open for fsync", path);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return errno_status(err, "fsync", path);
  return Status();
}

Status fsync_parent(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return fsync_path(parent.empty() ? "." : parent);
}

Status write_file(const std::string& path, std::string_view bytes, bool sync) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, "create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return errno_status(err, "write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return errno_status(err, "fsync", path);
  }
  if (::close(fd) != 0) return errno_status(errno, "close", path);
  return Status();
}

Result<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  TSR_ASSIGN_OR_RETURN(ReadFile file, ReadFile::open(path));
  const uint64_t size = file.size();
  if (size > max_bytes) {
    return data_loss("'" + path + "' has " + std::to_string(size) + " bytes, above the limit of " +
                     std::to_string(max_bytes) + " for this file");
  }
  std::string out(size, '\0');
  TSR_RETURN_IF_ERROR(file.read_at(0, out.data(), out.size()));
  return out;
}

Status replace_file(const std::string& path, std::string_view bytes, bool sync,
                    const std::function<Status()>& before_rename, bool* renamed) {
  if (renamed) *renamed = false;
  const std::string tmp = path + ".tmp";
  Status s = write_file(tmp, bytes, sync);
  if (s.ok() && before_rename) s = before_rename();
  if (!s.ok()) {
    ::unlink(tmp.c_str());  // a partial or unwanted `path`.tmp must not linger
    return s;
  }
  TSR_RETURN_IF_ERROR(rename_path(tmp, path));
  if (renamed) *renamed = true;
  if (sync) TSR_RETURN_IF_ERROR(fsync_parent(path));
  return Status();
}

Status rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return errno_status(errno, "rename to '" + to + "' from", from);
  }
  return Status();
}

Status remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return errno_status(ec.value(), "remove", path);
  return Status();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

Status require_regular(const struct stat& st, const std::string& path) {
  if (S_ISREG(st.st_mode)) return Status();
  return data_loss("'" + path + "' is " + file_kind(st.st_mode) + ", not a regular file");
}

}  // namespace

Result<uint64_t> file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_status(errno, "stat", path);
  TSR_RETURN_IF_ERROR(require_regular(st, path));
  return static_cast<uint64_t>(st.st_size);
}

Status check_relative_name(std::string_view name) {
  auto refuse = [&](const std::string& why) {
    const std::string_view shown = name.substr(0, 200);
    return data_loss("file name '" + escaped(shown) + (shown.size() < name.size() ? "..." : "") +
                     "' " + why);
  };
  if (name.empty()) return refuse("is empty");
  if (name.size() > kMaxNameBytes) {
    return refuse("is longer than " + std::to_string(kMaxNameBytes) + " bytes");
  }
  if (name.find('\0') != std::string_view::npos) return refuse("holds a NUL byte");
  if (name.front() == '/') return refuse("is absolute (must be relative to the checkpoint root)");
  size_t start = 0;
  for (;;) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == ".") return refuse("has an empty or '.' component");
    if (part == "..") return refuse("has a '..' component (leads outside the checkpoint root)");
    if (end == name.size()) return Status();
    start = end + 1;
  }
}

namespace {

std::vector<std::string> components(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    if (end > start) out.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

Result<std::string> path_in_root(const std::string& root, std::string_view name) {
  TSR_RETURN_IF_ERROR(check_relative_name(name));
  std::error_code ec;
  // "" is the current directory, as in join("", name).
  const std::string base = std::filesystem::canonical(root.empty() ? "." : root, ec).string();
  if (ec) return errno_status(ec.value(), "open checkpoint directory", root);
  auto escape = [&](const std::string& why) {
    return data_loss("file name '" + escaped(name) + "' " + why +
                     " outside the checkpoint directory '" + root + "'; refused");
  };
  // A realpath() confined to `base`: `resolved` holds real directories below it, so a ".." from
  // a link target pops a real component, and nothing outside `base` is ever lstat()ed.
  std::vector<std::string> resolved;
  std::vector<std::string> todo = components(name);
  std::reverse(todo.begin(), todo.end());  // a stack: next component at the back
  int links = 0;
  auto current = [&] {
    std::string p = base;
    for (const auto& c : resolved) p += "/" + c;
    return p;
  };
  while (!todo.empty()) {
    std::string part = std::move(todo.back());
    todo.pop_back();
    if (part == ".") continue;
    if (part == "..") {
      if (resolved.empty()) return escape("leads (through a symbolic link)");
      resolved.pop_back();
      continue;
    }
    const std::string candidate = current() + "/" + part;
    struct stat st;
    if (::lstat(candidate.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      resolved.push_back(std::move(part));  // a missing one fails at open, inside the root
      continue;
    }
    if (++links > 40) return escape("has too many symbolic links; it may lead");
    std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
    const ssize_t n = ::readlink(candidate.c_str(), target.data(), target.size());
    if (n < 0 || static_cast<size_t>(n) >= target.size()) {
      return escape("has an unreadable symbolic link; it may lead");
    }
    target.resize(static_cast<size_t>(n));
    if (!target.empty() && target.front() == '/') {
      // Absolute: allowed only when it names a place under the (canonical) root, without "..".
      if (target.compare(0, base.size(), base) != 0 ||
          (target.size() > base.size() && target[base.size()] != '/') ||
          target.find("/..") != std::string::npos) {
        return escape("leads through a symbolic link");
      }
      resolved.clear();
      target.erase(0, base.size());
    }
    std::vector<std::string> more = components(target);
    for (auto it = more.rbegin(); it != more.rend(); ++it) todo.push_back(std::move(*it));
  }
  return current();
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return errno_status(errno, "list directory", path);
  std::vector<std::string> out;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") out.push_back(std::move(name));
  }
  ::closedir(dir);
  return out;
}

Result<ReadFile> ReadFile::open(const std::string& path) {
  ReadFile file;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd_ < 0) return errno_status(errno, "open", path);
  file.path_ = path;
  struct stat st;
  if (::fstat(file.fd_, &st) != 0) return errno_status(errno, "stat", path);
  TSR_RETURN_IF_ERROR(require_regular(st, path));
  file.size_ = static_cast<uint64_t>(st.st_size);
  return file;
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

ReadFile::ReadFile(ReadFile&& other) noexcept {
  *this = std::move(other);
}

ReadFile& ReadFile::operator=(ReadFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

Status ReadFile::read_at(uint64_t offset, void* dst, size_t bytes) const {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd_, static_cast<char*>(dst) + done, bytes - done,
                        static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "read", path_);
    if (n == 0) {
      return data_loss("'" + path_ + "' is truncated: wanted bytes [" + std::to_string(offset) +
                       ", " + std::to_string(offset + bytes) + ")");
    }
    done += static_cast<size_t>(n);
  }
  return Status();
}

}  // namespace tessera::ckpt::fs
