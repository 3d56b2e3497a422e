// The ranks' output on its way to the launcher's stdout and stderr: each complete line gets a
// "[rank R] " prefix so interleaved ranks stay readable, and the launcher's own messages go to
// stderr with a "tessera launch: " prefix. A gone stdout drops output but never stops the job.
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

#include "job.h"

namespace tessera::tools::launch {

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: drop the output, keep supervising
    text.remove_prefix(static_cast<size_t>(n));
  }
}

void say(const std::string& line) {
  write_all(2, "tessera launch: " + line + "\n");
}

void Job::flush(Stream& s) {
  if (s.partial.empty()) return;
  write_all(s.target, "[rank " + std::to_string(s.rank) + "] " + s.partial + "\n");
  s.partial.clear();
}

// Reads what is available; writes every complete line with its prefix. At EOF, flushes the rest
// and closes the pipe (fd -1).
void Job::pump(Stream& s) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      flush(s);
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    std::string out;
    const std::string prefix = "[rank " + std::to_string(s.rank) + "] ";
    size_t start = 0;
    for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += prefix;
      out.append(s.partial, start, nl + 1 - start);
    }
    s.partial.erase(0, start);
    write_all(s.target, out);
    if (s.partial.size() > 1 << 20) flush(s);  // a megabyte without newline: pass it on anyway
  }
}

}  // namespace tessera::tools::launch
