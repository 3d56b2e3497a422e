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

namespace {

Result<std::string> read_whole(const ReadFile& file, uint64_t max_bytes) {
  const uint64_t size = file.size();
  if (size > max_bytes) {
    return data_loss("'" + file.path() + "' has " + std::to_string(size) +
                     " bytes, above the limit of " + std::to_string(max_bytes) + " for this file");
  }
  std::string out(size, '\0');
  TSR_RETURN_IF_ERROR(file.read_at(0, out.data(), out.size()));
  return out;
}

}  // namespace

Result<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  TSR_ASSIGN_OR_RETURN(ReadFile file, ReadFile::open(path));
  return read_whole(file, max_bytes);
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

namespace {

// The names in an open directory (no . and ..); closes it.
std::vector<std::string> entries_of(DIR* dir) {
  std::vector<std::string> out;
  while (struct dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") out.push_back(std::move(name));
  }
  ::closedir(dir);
  return out;
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

namespace {

// A realpath() confined to `base`, walked through directory descriptors: dirs[i + 1] is the
// directory resolved[i], held open, so a ".." from a link target pops a real component and
// nothing outside `base` is ever looked at. Ends with the last component in `leaf`.
class RootWalk {
 public:
  RootWalk(std::string base, UniqueFd root, std::string_view name, const std::string& shown_root)
      : base_(std::move(base)), name_(name), shown_root_(shown_root) {
    dirs_.push_back(std::move(root));
    todo_ = components(name);
    std::reverse(todo_.begin(), todo_.end());  // a stack: next component at the back
  }

  // On success: dir() holds leaf(); missing() when a directory on the way does not exist.
  Status run();
  std::string path() const {
    std::string p = base_;
    for (const auto& c : resolved_) p += "/" + c;
    return leaf_.empty() ? p : p + "/" + leaf_;
  }
  UniqueFd take_dir() { return std::move(dirs_.back()); }
  const std::string& leaf() const { return leaf_; }
  bool missing() const { return missing_; }

 private:
  Status escape(const std::string& why) const {
    return data_loss("file name '" + escaped(name_) + "' " + why +
                     " outside the checkpoint directory '" + shown_root_ + "'; refused");
  }
  Status step(const std::string& part);
  Status follow(const std::string& part, const struct stat& st);

  std::string base_;
  std::string_view name_;
  const std::string& shown_root_;
  std::vector<UniqueFd> dirs_;
  std::vector<std::string> resolved_, todo_;
  std::string leaf_;
  bool missing_ = false;
  int links_ = 0;
};

Status RootWalk::run() {
  while (!todo_.empty() && !missing_) {
    const std::string part = std::move(todo_.back());
    todo_.pop_back();
    TSR_RETURN_IF_ERROR(step(part));
  }
  if (missing_) {
    // Nothing below a missing directory exists: the rest is joined as it is and fails at open.
    for (auto it = todo_.rbegin(); it != todo_.rend(); ++it) leaf_ += "/" + *it;
    return Status();
  }
  if (leaf_.empty()) {
    // The name ended at a directory (a link target ending in ".." or "."): name it by its parent.
    if (resolved_.empty()) {
      leaf_ = ".";
    } else {
      leaf_ = std::move(resolved_.back());
      resolved_.pop_back();
      dirs_.pop_back();
    }
  }
  return Status();
}

Status RootWalk::step(const std::string& part) {
  if (part == ".") return Status();
  if (part == "..") {
    if (resolved_.empty()) return escape("leads (through a symbolic link)");
    resolved_.pop_back();
    dirs_.pop_back();
    return Status();
  }
  const int parent = dirs_.back().get();
  struct stat st;
  if (::fstatat(parent, part.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) return errno_status(errno, "stat", path() + "/" + part);
    missing_ = !todo_.empty();  // a missing last component fails at open, inside the root
    leaf_ = part;
    return Status();
  }
  if (S_ISLNK(st.st_mode)) return follow(part, st);
  if (todo_.empty()) {
    leaf_ = part;  // opened later, relative to its directory, with O_NOFOLLOW
    return Status();
  }
  UniqueFd next(::openat(parent, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (next.get() < 0) {
    // ENOTDIR also when it was swapped for a link since the fstatat: refused, never followed.
    if (errno == ENOENT) {
      missing_ = true;
      leaf_ = part;
      return Status();
    }
    return errno_status(errno, "open", path() + "/" + part);
  }
  dirs_.push_back(std::move(next));
  resolved_.push_back(part);
  return Status();
}

Status RootWalk::follow(const std::string& part, const struct stat& st) {
  if (++links_ > 40) return escape("has too many symbolic links; it may lead");
  std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
  const ssize_t n = ::readlinkat(dirs_.back().get(), part.c_str(), target.data(), target.size());
  if (n < 0 || static_cast<size_t>(n) >= target.size()) {
    return escape("has an unreadable symbolic link; it may lead");
  }
  target.resize(static_cast<size_t>(n));
  if (!target.empty() && target.front() == '/') {
    // Absolute: allowed only when it names a place under the (canonical) root, without "..".
    if (target.compare(0, base_.size(), base_) != 0 ||
        (target.size() > base_.size() && target[base_.size()] != '/') ||
        target.find("/..") != std::string::npos) {
      return escape("leads through a symbolic link");
    }
    resolved_.clear();
    dirs_.resize(1);
    target.erase(0, base_.size());
  }
  std::vector<std::string> more = components(target);
  for (auto it = more.rbegin(); it != more.rend(); ++it) todo_.push_back(std::move(*it));
  return Status();
}

}  // namespace

Result<NameInRoot> resolve_in_root(const std::string& root, std::string_view name) {
  TSR_RETURN_IF_ERROR(check_relative_name(name));
  std::error_code ec;
  // "" is the current directory, as in join("", name).
  std::string base = std::filesystem::canonical(root.empty() ? "." : root, ec).string();
  if (ec) return errno_status(ec.value(), "open checkpoint directory", root);
  UniqueFd root_fd(::open(base.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root_fd.get() < 0) return errno_status(errno, "open checkpoint directory", root);
  RootWalk walk(std::move(base), std::move(root_fd), name, root);
  TSR_RETURN_IF_ERROR(walk.run());
  NameInRoot out;
  out.name_ = std::string(name);
  out.path_ = walk.path();
  out.leaf_ = walk.leaf();
  out.missing_ = walk.missing();
  out.dir_ = walk.take_dir();
  return out;
}

UniqueFd NameInRoot::open_leaf(int flags, const char* what, Status* error) const {
  if (missing_) {
    *error = errno_status(ENOENT, what, path_);
    return UniqueFd();
  }
  UniqueFd fd(::openat(dir_.get(), leaf_.c_str(), flags | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() >= 0) return fd;
  if (errno == ELOOP) {
    *error = data_loss("file name '" + escaped(name_) + "' ('" + path_ +
                       "') is a symbolic link now, not when it was checked; refused");
  } else {
    *error = errno_status(errno, what, path_);
  }
  return fd;
}

Result<ReadFile> NameInRoot::open() const {
  Status error;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; ReadFile refuses it.
  UniqueFd fd = open_leaf(O_RDONLY | O_NONBLOCK, "open", &error);
  if (fd.get() < 0) return error;
  return ReadFile::adopt(std::move(fd), path_);
}

Result<std::vector<std::string>> NameInRoot::list() const {
  Status error;
  UniqueFd fd = open_leaf(O_RDONLY | O_DIRECTORY, "list directory", &error);
  if (fd.get() < 0) return error;
  DIR* dir = ::fdopendir(fd.get());
  if (dir == nullptr) return errno_status(errno, "list directory", path_);
  fd.release();  // owned by `dir` now
  return entries_of(dir);
}

Result<std::string> path_in_root(const std::string& root, std::string_view name) {
  TSR_ASSIGN_OR_RETURN(NameInRoot resolved, resolve_in_root(root, name));
  return resolved.path();
}

Result<ReadFile> open_in_root(const std::string& root, std::string_view name) {
  TSR_ASSIGN_OR_RETURN(NameInRoot resolved, resolve_in_root(root, name));
  return resolved.open();
}

Result<std::string> read_in_root(const std::string& root, std::string_view name,
                                 uint64_t max_bytes) {
  TSR_ASSIGN_OR_RETURN(ReadFile file, open_in_root(root, name));
  return read_whole(file, max_bytes);
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return errno_status(errno, "list directory", path);
  return entries_of(dir);
}

Result<ReadFile> ReadFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return errno_status(errno, "open", path);
  return adopt(std::move(fd), path);
}

Result<ReadFile> ReadFile::adopt(UniqueFd fd, std::string path) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "stat", path);
  TSR_RETURN_IF_ERROR(require_regular(st, path));
  ReadFile file;
  file.fd_ = std::move(fd);
  file.size_ = static_cast<uint64_t>(st.st_size);
  file.path_ = std::move(path);
  return file;
}

Status ReadFile::read_at(uint64_t offset, void* dst, size_t bytes) const {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(fd_.get(), static_cast<char*>(dst) + done, bytes - done,
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
