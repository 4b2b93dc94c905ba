/* A hostile native program for the jail tests: each mode tries one way out of the jail (see tests/test_jail.py). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *mode = argv[1], *target = argc > 2 ? argv[2] : "";
    if (!strcmp(mode, "ok")) { FILE *f = fopen("out.bin", "wb"); fputs("x", f); fclose(f); return 0; }
    if (!strcmp(mode, "unlink")) return syscall(SYS_unlink, target) == 0 ? 0 : 7;
    if (!strcmp(mode, "remove")) return remove(target) == 0 ? 0 : 7;
    if (!strcmp(mode, "fork")) { pid_t p = fork(); if (p == 0) { sleep(30); } return p > 0 ? 0 : 7; }
    if (!strcmp(mode, "kill_parent")) return kill(getppid(), SIGKILL);
    if (!strcmp(mode, "kill_all")) return kill(-1, SIGKILL);
    if (!strcmp(mode, "shell")) { char *a[] = {"/bin/sh", "-c", (char *)target, NULL}; execv(a[0], a); return 7; }
    if (!strcmp(mode, "socket")) return socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : 7;
    if (!strcmp(mode, "read_host")) { FILE *f = fopen(target, "rb"); return f ? 0 : 7; }
    if (!strcmp(mode, "write_host")) { FILE *f = fopen(target, "wb"); return f && fputs("owned", f) >= 0 && !fclose(f) ? 0 : 7; }
    if (!strcmp(mode, "spin")) { for (volatile unsigned long i = 0;; ++i) {} }
    if (!strcmp(mode, "big_file")) { FILE *f = fopen("big.bin", "wb"); static char b[1 << 16]; for (int i = 0; i < 64; ++i) fwrite(b, 1, sizeof b, f); fclose(f); return 0; }
    if (!strcmp(mode, "many_files")) {      /* 1 MB files up to argv[2] of them, each within the per-file limit */
        static char b[1 << 20]; char name[32]; int n = atoi(target);
        for (int i = 0; i < n; ++i) { snprintf(name, sizeof name, "f%d.bin", i); FILE *f = fopen(name, "wb"); if (f) { fwrite(b, 1, sizeof b, f); fclose(f); } }
        return 0;
    }
    if (!strcmp(mode, "flood_stdout")) { static char b[1 << 20]; memset(b, 'y', sizeof b); for (int i = 0; i < atoi(target); ++i) fwrite(b, 1, sizeof b, stdout); return 0; }
    if (!strcmp(mode, "exit0")) _exit(0);
    if (!strcmp(mode, "ptrace")) return syscall(SYS_ptrace, 0, 0, 0, 0) == 0 ? 0 : 7;
    return 2;
}
