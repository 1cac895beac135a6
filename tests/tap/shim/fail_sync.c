/*
 * An LD_PRELOAD shim for tests/tap/t/011_fsync.pl: fsync() and fdatasync()
 * fail once with EIO, in whichever process of the server calls one first
 * after the file named by INSTA_FAIL_SYNC appears (that process removes it:
 * unlink() decides the one failure among processes). Everything else goes
 * to the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int
fail_now(void)
{
	const char *trigger = getenv("INSTA_FAIL_SYNC");

	return trigger != NULL && unlink(trigger) == 0;
}

int
fsync(int fd)
{
	static int (*real) (int);

	if (fail_now())
	{
		errno = EIO;
		return -1;
	}
	if (real == NULL)
		real = (int (*) (int)) dlsym(RTLD_NEXT, "fsync");
	return real(fd);
}

int
fdatasync(int fd)
{
	static int (*real) (int);

	if (fail_now())
	{
		errno = EIO;
		return -1;
	}
	if (real == NULL)
		real = (int (*) (int)) dlsym(RTLD_NEXT, "fdatasync");
	return real(fd);
}
