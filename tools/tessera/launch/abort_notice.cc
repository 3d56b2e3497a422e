#include "abort_notice.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tessera::tools::launch {

Result<AbortNotice> AbortNotice::create() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tessera-launch-XXXXXX";
  std::vector<char> name(dir.begin(), dir.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) {
    return internal_error("cannot make the abort notice's directory " + dir + ": " +
                          std::strerror(errno));
  }
  dir = name.data();
  return AbortNotice(dir, dir + "/abort");
}

AbortNotice::AbortNotice(AbortNotice&& other) noexcept
    : dir_(std::move(other.dir_)), path_(std::move(other.path_)), published_(other.published_) {
  other.dir_.clear();
}

AbortNotice::~AbortNotice() {
  if (dir_.empty()) return;
  ::unlink(path_.c_str());
  ::unlink((path_ + ".tmp").c_str());
  ::rmdir(dir_.c_str());
}

Status AbortNotice::publish(const std::string& why) {
  if (published_ || dir_.empty()) return {};
  published_ = true;
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return internal_error("cannot write the abort notice " + tmp + ": " + std::strerror(errno));
  const std::string line = why + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return internal_error("cannot write the abort notice " + tmp + ": " + std::strerror(saved));
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return internal_error("cannot publish the abort notice " + path_ + ": " + std::strerror(errno));
  }
  return {};
}

}  // namespace tessera::tools::launch
