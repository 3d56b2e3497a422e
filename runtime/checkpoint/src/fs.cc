#include "fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

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

Result<std::string> read_file(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(uint64_t size, file_size(path));
  TSR_ASSIGN_OR_RETURN(ReadFile file, ReadFile::open(path));
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

Result<uint64_t> file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_status(errno, "stat", path);
  return static_cast<uint64_t>(st.st_size);
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
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd_ < 0) return errno_status(errno, "open", path);
  file.path_ = path;
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
