#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A block device whose speed `make bench` controls: a loop device over a
file on a private tmpfs, an ext4 filesystem on it, and a cgroup v1 blkio
group that throttles reads from it (blkio.throttle.read_bps_device and
read_iops_device; this kernel has no device-mapper).  Readers are run in
that group; the page cache of the device's files is dropped between runs
for those files only (posix_fadvise DONTNEED and blockdev --flushbufs),
never machine-wide.

    with Device(work, mib=2600) as dev:
        copy files under dev.root, then dev.seal()
        dev.throttle(bps=10**9)              # or iops=2000
        dev.drop_cache()
        before = dev.read_bytes()
        dev.run([...])                       # a reader in the group
        read = dev.read_bytes() - before

Everything is torn down by close() (also on an exception inside the
with block, and by leftover() for a run that was killed): unmount,
detach the loop device, remove the group, unmount the tmpfs.

    device.py leftover WORK     tear down what a killed run left
    device.py selftest WORK     set up, read a file throttled, tear down
"""
import os
import subprocess
import sys
import time

BLKIO = "/sys/fs/cgroup/blkio"


def available():
    """None when a device can be built here, else why not."""
    if os.geteuid() != 0:
        return "needs root (loop devices, mounts, cgroups)"
    if not os.path.exists(os.path.join(BLKIO, "blkio.throttle.read_bps_device")):
        return f"no cgroup v1 blkio throttling at {BLKIO}"
    for tool in ("losetup", "mkfs.ext4", "blockdev"):
        if subprocess.call(["sh", "-c", f"command -v {tool}"],
                           stdout=subprocess.DEVNULL) != 0:
            return f"{tool} is not installed"
    return None


def _sh(argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True,
                          text=True).stdout.strip()


class Device:
    def __init__(self, work, mib):
        self.work = os.path.abspath(work)
        self.tmpfs = os.path.join(self.work, "tmpfs")
        self.root = os.path.join(self.work, "disk")
        self.cgroup = os.path.join(BLKIO, f"ckptfs-bench-{os.getpid()}")
        self.loop = None
        self.devno = None
        leftover(self.work)
        os.makedirs(self.tmpfs, exist_ok=True)
        os.makedirs(self.root, exist_ok=True)
        try:
            _sh(["mount", "-t", "tmpfs", "-o", f"size={mib + 64}m",
                 "ckptfs-bench", self.tmpfs])
            img = os.path.join(self.tmpfs, "disk.img")
            with open(img, "wb") as fh:
                fh.truncate(mib << 20)
            self.loop = _sh(["losetup", "--find", "--show", img])
            name = os.path.basename(self.loop)
            with open(f"/sys/block/{name}/dev") as fh:
                self.devno = fh.read().strip()
            self.stat = f"/sys/block/{name}/stat"
            _sh(["mkfs.ext4", "-q", "-F", "-E",
                 "lazy_itable_init=0,lazy_journal_init=0", self.loop])
            _sh(["mount", "-o", "noatime", self.loop, self.root])
            os.makedirs(self.cgroup, exist_ok=True)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ setup
    def seal(self):
        """After the files are written: flush them to the device, so that
        dropping their pages later loses nothing and reads hit it."""
        for d, _, fs in os.walk(self.root):
            for f in fs:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        _sh(["blockdev", "--flushbufs", self.loop], check=False)

    def throttle(self, bps=0, iops=0):
        """Reads of the device by the group's tasks: at most bps bytes/s
        and iops requests/s (0: no limit)."""
        for knob, val in (("read_bps_device", bps),
                          ("read_iops_device", iops)):
            with open(os.path.join(self.cgroup, f"blkio.throttle.{knob}"),
                      "w") as fh:
                fh.write(f"{self.devno} {int(val)}\n")

    # ------------------------------------------------------------ readers
    def _enter(self):
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as fh:
            fh.write(f"{os.getpid()}\n")

    def popen(self, argv, **kw):
        """Start argv in the throttled group (it and its threads)."""
        return subprocess.Popen(argv, preexec_fn=self._enter, **kw)

    def run(self, argv, **kw):
        """Run argv in the group; its stdout, as text."""
        kw.setdefault("stdout", subprocess.PIPE)
        p = self.popen(argv, text=True, **kw)
        out, _ = p.communicate()
        if p.returncode:
            raise subprocess.CalledProcessError(p.returncode, argv, out)
        return out

    def drop_cache(self):
        """Drop the page cache of every file on the device (and the
        device's own buffers), not the machine's."""
        for d, _, fs in os.walk(self.root):
            for f in fs:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
        _sh(["blockdev", "--flushbufs", self.loop], check=False)

    def read_bytes(self):
        """Bytes read from the device so far (its sector counter)."""
        with open(self.stat) as fh:
            return int(fh.read().split()[2]) * 512

    def read_ios(self):
        """Read requests the device completed so far."""
        with open(self.stat) as fh:
            return int(fh.read().split()[0])

    # ------------------------------------------------------------ teardown
    def close(self):
        if os.path.isdir(self.cgroup):
            _release(self.cgroup)
        if os.path.ismount(self.root):
            if subprocess.call(["umount", self.root],
                               stderr=subprocess.DEVNULL) != 0:
                subprocess.call(["umount", "-l", self.root])
        if self.loop:
            subprocess.call(["losetup", "-d", self.loop],
                            stderr=subprocess.DEVNULL)
            self.loop = None
        if os.path.ismount(self.tmpfs):
            if subprocess.call(["umount", self.tmpfs],
                               stderr=subprocess.DEVNULL) != 0:
                subprocess.call(["umount", "-l", self.tmpfs])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _release(cgroup):
    """Move any task left in cgroup to the root group, remove it."""
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as fh:
            pids = fh.read().split()
        for pid in pids:
            try:
                with open(os.path.join(BLKIO, "cgroup.procs"), "w") as fh:
                    fh.write(f"{pid}\n")
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while True:
            try:
                os.rmdir(cgroup)
                return
            except OSError:
                if time.monotonic() > deadline:
                    print(f"  device: could not remove {cgroup}",
                          file=sys.stderr)
                    return
                time.sleep(0.05)
    except FileNotFoundError:
        pass


def leftover(work):
    """Tear down what an earlier, killed run left under work: its mounts,
    loop devices over its image, and groups whose process is gone."""
    work = os.path.abspath(work)
    root, tmpfs = os.path.join(work, "disk"), os.path.join(work, "tmpfs")
    img = os.path.join(tmpfs, "disk.img")
    if os.path.ismount(root):
        subprocess.call(["umount", "-l", root])
    if os.path.exists(img):
        for line in _sh(["losetup", "-j", img], check=False).splitlines():
            subprocess.call(["losetup", "-d", line.split(":")[0]])
    if os.path.ismount(tmpfs):
        subprocess.call(["umount", "-l", tmpfs])
    if os.path.isdir(BLKIO):
        for name in os.listdir(BLKIO):
            if name.startswith("ckptfs-bench-"):
                pid = name.rsplit("-", 1)[1]
                if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                    _release(os.path.join(BLKIO, name))


def selftest(work):
    """Build a device, write 64 MiB, read it at 100 MB/s throttled and at
    full speed, tear down."""
    with Device(work, 256) as dev:
        path = os.path.join(dev.root, "f")
        with open(path, "wb") as fh:
            fh.write(os.urandom(1 << 20) * 64)
        dev.seal()
        for bps in (100 * 10**6, 0):
            dev.throttle(bps=bps)
            dev.drop_cache()
            b0, t0 = dev.read_bytes(), time.perf_counter()
            dev.run(["cat", path], stdout=subprocess.DEVNULL)
            dt = time.perf_counter() - t0
            print(f"limit {bps / 1e6:.0f} MB/s: read {(dev.read_bytes() - b0) >> 20} "
                  f"MiB from the device at {64 * 1.048576 / dt:.0f} MB/s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "leftover":
        leftover(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "selftest":
        sys.exit(selftest(sys.argv[2]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
