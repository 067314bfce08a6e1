// Copyright: (c) 2026, llamarpc.cluster contributors
// GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
// SPDX-License-Identifier: GPL-3.0-or-later
//
// llamarpc-fnv1a [FILE | -r OFFSET LENGTH FILE]...: print "<FNV-1a 64 as 16 lower-case hex digits>  FILE" for each
// file, or for LENGTH bytes of FILE from OFFSET (a tensor inside a GGUF shard), in order: the hash llama.cpp's RPC
// tensor cache names its files by (ggml-rpc.cpp fnv_hash: offset 0xcbf29ce484222325, prime 0x100000001b3).
// A file or range that cannot be read whole prints "-  FILE" and a reason on stderr, and the exit status is 1.
// Built with llama.cpp on the build host (the llama_cpp role's llama_cpp_helpers) and shipped with it; for binaries
// without it, on the worker by the llama_rpc_worker role (g++ -O2 -Wall). Hashing in Python is over 100 times slower.
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

// length < 0: to the end of the file.
static bool fnv1a_file(const char * path, off_t offset, long long length, uint64_t & hash) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    if (offset > 0 && lseek(fd, offset, SEEK_SET) != offset) {
        int saved = errno;
        close(fd);
        errno = saved;
        return false;
    }
    std::vector<unsigned char> buffer(1 << 20);
    uint64_t h = 0xcbf29ce484222325ULL;
    long long left = length;
    for (;;) {
        size_t want = buffer.size();
        if (left >= 0 && (unsigned long long) left < want) {
            want = (size_t) left;
        }
        if (want == 0) {
            break;
        }
        ssize_t got = read(fd, buffer.data(), want);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            int saved = errno;
            close(fd);
            errno = saved;
            return false;
        }
        if (got == 0) {
            break;
        }
        for (ssize_t i = 0; i < got; ++i) {
            h ^= buffer[i];
            h *= 0x100000001b3ULL;
        }
        if (left >= 0) {
            left -= got;
        }
    }
    close(fd);
    if (left > 0) {
        errno = ESPIPE;  // the file ends before the range does
        return false;
    }
    hash = h;
    return true;
}

static bool number(const char * text, long long & value) {
    char * end = nullptr;
    errno = 0;
    value = std::strtoll(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && value >= 0;
}

int main(int argc, char ** argv) {
    int status = 0;
    for (int i = 1; i < argc; ++i) {
        uint64_t hash = 0;
        long long offset = 0;
        long long length = -1;
        if (std::strcmp(argv[i], "-r") == 0) {
            if (i + 3 >= argc || !number(argv[i + 1], offset) || !number(argv[i + 2], length)) {
                std::fprintf(stderr, "llamarpc-fnv1a: -r needs OFFSET LENGTH FILE\n");
                return 2;
            }
            i += 3;
        }
        if (fnv1a_file(argv[i], (off_t) offset, length, hash)) {
            std::printf("%016" PRIx64 "  %s\n", hash, argv[i]);
        } else {
            std::fprintf(stderr, "llamarpc-fnv1a: %s: %s\n", argv[i], std::strerror(errno));
            std::printf("-  %s\n", argv[i]);
            status = 1;
        }
    }
    return std::fflush(stdout) == 0 ? status : 1;
}
