/*
 * An LD_PRELOAD shim for scripts/dev/busy.sh: a slow disk. fsync(),
 * fdatasync() and sync_file_range() each wait BUSY_FSYNC_MS milliseconds
 * (default 5) before the C library's runs, in every process that loads it
 * (PostgreSQL's WAL flushes and checkpoints among them).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void
slow_down(void)
{
	const char *ms = getenv("BUSY_FSYNC_MS");
	long		wait = ms ? atol(ms) : 5;
	struct timespec t = {wait / 1000, (wait % 1000) * 1000000L};

	if (wait > 0)
		nanosleep(&t, NULL);
}

int
fsync(int fd)
{
	static int (*real) (int);

	if (!real)
		real = dlsym(RTLD_NEXT, "fsync");
	slow_down();
	return real(fd);
}

int
fdatasync(int fd)
{
	static int (*real) (int);

	if (!real)
		real = dlsym(RTLD_NEXT, "fdatasync");
	slow_down();
	return real(fd);
}

int
sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags)
{
	static int (*real) (int, off_t, off_t, unsigned int);

	if (!real)
		real = dlsym(RTLD_NEXT, "sync_file_range");
	slow_down();
	return real(fd, offset, nbytes, flags);
}
