// Copyright: (c) 2026, llamarpc.cluster contributors
// GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
// SPDX-License-Identifier: GPL-3.0-or-later
//
// llamarpc-fnv1a FILE...: print "<FNV-1a 64 as 16 lower-case hex digits>  FILE" for each file, the hash llama.cpp's
// RPC tensor cache names its files by (ggml-rpc.cpp fnv_hash: offset 0xcbf29ce484222325, prime 0x100000001b3).
// A file that cannot be read prints "-  FILE" and a reason on stderr, and the exit status is 1.
// Built on the worker by the llama_rpc_worker role (g++ -O2); hashing in Python is over 100 times slower.
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

static bool fnv1a_file(const char * path, uint64_t & hash) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    std::vector<unsigned char> buffer(1 << 20);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (;;) {
        ssize_t got = read(fd, buffer.data(), buffer.size());
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
    }
    close(fd);
    hash = h;
    return true;
}

int main(int argc, char ** argv) {
    int status = 0;
    for (int i = 1; i < argc; ++i) {
        uint64_t hash = 0;
        if (fnv1a_file(argv[i], hash)) {
            std::printf("%016" PRIx64 "  %s\n", hash, argv[i]);
        } else {
            std::fprintf(stderr, "llamarpc-fnv1a: %s: %s\n", argv[i], std::strerror(errno));
            std::printf("-  %s\n", argv[i]);
            status = 1;
        }
    }
    return std::fflush(stdout) == 0 ? status : 1;
}
