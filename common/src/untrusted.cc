// Bounded reads of regular files and printable names (untrusted.h).
#include "tessera/common/untrusted.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tessera {
namespace {

Status open_error(const std::string& path, int err) {
  std::string message = path + ": cannot open: " + std::strerror(err);
  return err == ENOENT ? not_found(std::move(message)) : invalid_argument(std::move(message));
}

// Only regular files: a directory reads as nothing, /dev/zero and a FIFO without end.
Status check_regular(const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return Status();
  if (S_ISDIR(st.st_mode)) return invalid_argument(path + ": is a directory, not a file");
  return invalid_argument(path + ": not a regular file (a device, FIFO or socket)");
}

Status too_large(const std::string& path, uint64_t max_bytes) {
  return resource_exhausted(path + ": larger than the limit of " + std::to_string(max_bytes) +
                            " bytes for this file");
}

}  // namespace

Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return open_error(path, errno);
  TSR_RETURN_IF_ERROR(check_regular(path, st));
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(path, max_bytes);
  // O_NONBLOCK: should the path be swapped for a FIFO after the stat, open does not wait.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return open_error(path, errno);
  std::string out;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = open_error(path, errno);
  } else {
    status = check_regular(path, st);
  }
  char buf[65536];
  while (status.ok()) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = invalid_argument(path + ": read failed: " + std::strerror(errno));
    } else if (out.size() + static_cast<size_t>(n) > max_bytes) {
      status = too_large(path, max_bytes);  // the file grew after the stat
    } else {
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace tessera
