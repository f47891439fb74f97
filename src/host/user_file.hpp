// Reading a file a user named (a tuned table, a model CSV): a regular file only, and at most a
// cap of bytes. A directory, a device such as /dev/zero, a FIFO or a socket is refused at once
// (no read, no blocking open), and a file over the cap is refused after reading just past it,
// so no path can hang the process or grow it without bound.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

namespace mxlinear::detail {

struct UserFile {
  std::string text;     // the whole file, when problem is empty
  std::string problem;  // else why it was not read, e.g. "is a directory, not a regular file"
};

inline UserFile read_user_file(const std::string& path, std::size_t cap) {
  UserFile file;
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; fstat on the open file
  // then decides, so the path cannot change between the check and the read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    file.problem = std::string("cannot be opened: ") + std::strerror(errno);
    return file;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    file.problem = std::string("cannot be read: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a special file";
    file.problem = std::string("is ") + kind + ", not a regular file";
  } else {
    // Up to one byte past the cap, to tell a file of exactly `cap` bytes from a larger one (a
    // regular file's st_size is not enough: /proc files report 0).
    char chunk[1 << 16];
    while (file.text.size() <= cap) {
      const std::size_t want = std::min(sizeof chunk, cap + 1 - file.text.size());
      const ssize_t got = ::read(fd, chunk, want);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        file.problem = std::string("cannot be read: ") + std::strerror(errno);
        break;
      }
      if (got == 0) break;
      file.text.append(chunk, static_cast<std::size_t>(got));
    }
    if (file.problem.empty() && file.text.size() > cap) {
      const std::string mib =
          cap % (std::size_t{1} << 20) == 0 ? " (" + std::to_string(cap >> 20) + " MiB)" : "";
      file.problem = "is larger than the cap of " + std::to_string(cap) + " bytes" + mib +
                     ": reading stopped after " + std::to_string(file.text.size()) + " bytes";
    }
  }
  ::close(fd);
  if (!file.problem.empty()) file.text.clear();
  return file;
}

}  // namespace mxlinear::detail
