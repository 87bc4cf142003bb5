#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""A tiny guest for qemu TCG, built from this machine's Debian packages.

The kernel of ``linux-image-amd64`` (``/boot/vmlinuz-<ver>``) boots a
gzip'ed newc initramfs holding ``busybox-static`` (``/bin/busybox``), the
virtio block modules of that kernel and an ``/init`` shell script.  The
script writes, every ~0.2 s, one 512-byte record at offset 0 of each
``/dev/vd[a-z]`` it sees (disks hot-plugged later included), and prints a
line per write on the console (``console=ttyS0``)::

    BOXGUEST <tag> up
    BOXGUEST <tag> wrote <disk> <counter>
    BOXGUEST <tag> error <disk> <counter>

``<tag>`` is the kernel parameter ``boxtag=``, else the SMBIOS system
UUID (under Nova: the instance's UUID), else ``guest``.  The record on
the disk is ``BOXGUEST <tag> <disk> <counter> <boot>\\n`` padded
with NULs to 512 bytes (:func:`parse_record`, :func:`read_record`);
``<boot>``, the first 8 hex digits of the kernel's random boot id, tells
two boots of one instance apart (an evacuated server and the guest it
left on its old host).  Each
disk has its own background loop, so a ``dd`` hanging on a cut iSCSI disk
does not stop the writes to the others.

``python -m devbox.guest_image DEST`` builds into ``DEST`` and prints the
kernel's and the initramfs' paths.  Standard library only.
"""

import collections
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import sys

BUSYBOX = '/bin/busybox'
BOOT_DIR = '/boot'
MODULES_DIR = '/lib/modules'
DEFAULT_TAG = 'guest'
RECORD_SIZE = 512
RECORD_MAGIC = 'BOXGUEST'
# Seconds between two writes of a disk and between two scans of /dev.
INTERVAL_US = 200000
# The virtio block stack; their dependencies come first (modules.dep).
MODULES = ('virtio', 'virtio_ring', 'virtio_pci_legacy_dev',
           'virtio_pci_modern_dev', 'virtio_pci', 'virtio_blk')
STAMP = 'guest-image.stamp'
KERNEL_NAME = 'vmlinuz'
INITRAMFS_NAME = 'initramfs.cpio.gz'

_TAG_RE = re.compile(r'^[A-Za-z0-9_.:+-]+$')
_BOOT_RE = re.compile(r'^[0-9a-f]{8}$')

#: A record read from a disk; *boot* None in a record of an older guest.
Record = collections.namedtuple('Record', 'tag disk counter boot')


def cmdline(tag=DEFAULT_TAG):
    """The kernel command line of a guest printing ``BOXGUEST <tag>``.

    With *tag* None the guest's tag is its SMBIOS system UUID: under Nova,
    the instance's UUID, so that one image tells its servers apart.
    """
    if tag is None:
        return 'console=ttyS0 quiet panic=-1'
    if not _TAG_RE.match(tag):
        raise ValueError('bad guest tag %r' % (tag,))
    return 'console=ttyS0 boxtag=%s quiet panic=-1' % tag


# --- records -----------------------------------------------------------


def make_record(tag, disk, counter, boot=None):
    """The 512 bytes the guest writes (for tests comparing)."""
    data = '%s %s %s %d' % (RECORD_MAGIC, tag, disk, counter)
    if boot is not None:
        data += ' ' + boot
    return (data + '\n').encode().ljust(RECORD_SIZE, b'\0')


def parse_record(data):
    """The :class:`Record` at the start of *data*, or None if none is."""
    if not data.startswith(RECORD_MAGIC.encode() + b' '):
        return None
    line = data[:RECORD_SIZE].split(b'\n', 1)[0].rstrip(b'\0 ')
    try:
        words = line.decode('ascii').split()
    except UnicodeDecodeError:
        return None
    if len(words) not in (4, 5) or words[0] != RECORD_MAGIC:
        return None
    boot = words[4] if len(words) == 5 else None
    if boot is not None and not _BOOT_RE.match(boot):
        return None
    try:
        counter = int(words[3])
    except ValueError:
        return None
    if counter < 0:
        return None
    return Record(words[1], words[2], counter, boot)


def read_record(path):
    """The record at offset 0 of a file or block device, or None."""
    with open(path, 'rb', buffering=0) as f:
        return parse_record(f.read(RECORD_SIZE))


# --- newc cpio ---------------------------------------------------------


def _pad4(n):
    return (4 - n % 4) % 4


class CpioWriter(object):
    """A newc ("070701") cpio archive, written to a binary file object."""

    def __init__(self, fileobj, mtime=0):
        self._f = fileobj
        self._ino = 0
        self._mtime = mtime
        self._closed = False

    def _entry(self, name, mode, data=b'', nlink=1, rdev=(0, 0)):
        name = name.lstrip('/')
        if not name or self._closed:
            raise ValueError('bad cpio entry %r' % (name,))
        self._ino += 1
        encoded = name.encode() + b'\0'
        fields = (self._ino, mode, 0, 0, nlink, self._mtime, len(data),
                  0, 0, rdev[0], rdev[1], len(encoded), 0)
        header = b'070701' + b''.join(b'%08X' % v for v in fields)
        self._f.write(header + encoded + b'\0' * _pad4(len(header)
                                                       + len(encoded)))
        self._f.write(data + b'\0' * _pad4(len(data)))

    def add_dir(self, name, perm=0o755):
        self._entry(name, stat.S_IFDIR | perm, nlink=2)

    def add_file(self, name, data, perm=0o644):
        self._entry(name, stat.S_IFREG | perm, data)

    def add_symlink(self, name, target):
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def add_chardev(self, name, major, minor, perm=0o600):
        self._entry(name, stat.S_IFCHR | perm, rdev=(major, minor))

    def close(self):
        if not self._closed:
            self._entry('TRAILER!!!', 0, nlink=1)
            self._closed = True


def read_cpio(data):
    """Parse a newc archive: ``[(name, mode, data, (rmaj, rmin))]``."""
    entries = []
    pos = 0
    while True:
        header = data[pos:pos + 110]
        if len(header) != 110 or header[:6] != b'070701':
            raise ValueError('bad cpio header at %d' % pos)
        f = [int(header[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, size, rdev, namesize = f[1], f[6], (f[9], f[10]), f[11]
        pos += 110
        name = data[pos:pos + namesize - 1].decode()
        pos += namesize + _pad4(110 + namesize)
        body = data[pos:pos + size]
        pos += size + _pad4(size)
        if name == 'TRAILER!!!':
            return entries
        entries.append((name, mode, body, rdev))


# --- the image ---------------------------------------------------------


def _version_key(version):
    return [int(p) if p.isdigit() else p
            for p in re.split(r'(\d+)', version)]


def kernel_version(boot_dir=BOOT_DIR, modules_dir=MODULES_DIR):
    """The newest kernel with both ``vmlinuz-<ver>`` and its modules."""
    found = [v for v in os.listdir(modules_dir)
             if os.path.isfile(os.path.join(boot_dir, 'vmlinuz-' + v))]
    if not found:
        raise RuntimeError('no kernel in %s with modules in %s (install '
                           'linux-image-amd64)' % (boot_dir, modules_dir))
    return max(found, key=_version_key)


def _module_name(path):
    base = os.path.basename(path)
    return base.split('.ko', 1)[0].replace('-', '_')


def module_paths(version, modules_dir=MODULES_DIR, wanted=MODULES):
    """``wanted`` and their dependencies, in load order.

    Paths relative to the version's directory, from ``modules.dep``.
    """
    deps = {}
    by_name = {}
    with open(os.path.join(modules_dir, version, 'modules.dep')) as f:
        for line in f:
            if ':' not in line:
                continue
            mod, rest = line.split(':', 1)
            mod = mod.strip()
            deps[mod] = rest.split()
            by_name[_module_name(mod)] = mod
    order = []

    def visit(mod, stack=()):
        if mod in order:
            return
        if mod in stack:
            raise RuntimeError('module dependency loop at %s' % mod)
        for dep in deps.get(mod, ()):
            visit(dep, stack + (mod,))
        order.append(mod)

    for name in wanted:
        if name not in by_name:
            # Built in: nothing to load.
            continue
        visit(by_name[name])
    return order


def _read_module(path):
    """A module's ELF bytes, decompressed (busybox insmod loads raw ELF)."""
    with open(path, 'rb') as f:
        data = f.read()
    if path.endswith('.xz'):
        return lzma.decompress(data)
    if path.endswith('.gz'):
        return gzip.decompress(data)
    if path.endswith('.zst'):
        raise RuntimeError('%s: zstd modules need a decompressor the '
                           'standard library lacks' % path)
    return data


def _plain_name(path):
    for ext in ('.xz', '.gz', '.zst'):
        if path.endswith(ext):
            return path[:-len(ext)]
    return path


INIT_TEMPLATE = r"""#!/bin/sh
# The box's guest (devbox/guest_image.py): write a record to every
# /dev/vd[a-z] every ~0.2 s, one background loop per disk.
/bin/busybox --install -s
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run/box
TAG=guest
UUID=/sys/class/dmi/id/product_uuid
[ -r $UUID ] && read TAG < $UUID
BOOT=$(cut -c1-8 /proc/sys/kernel/random/boot_id)
for w in $(cat /proc/cmdline); do
    case "$w" in boxtag=?*) TAG="${w#boxtag=}" ;; esac
done
say() { echo "BOXGUEST $TAG $*" > /dev/console; }
for m in @MODULES@; do
    insmod "/lib/modules/@VERSION@/$m" || say insmod-failed "$m"
done
disk_loop() {
    d=$1
    n=0
    [ -f "/run/box/$d.n" ] && read n < "/run/box/$d.n"
    while [ -b "/dev/$d" ]; do
        n=$((n + 1))
        echo "$n" > "/run/box/$d.n"
        printf 'BOXGUEST %s %s %s %s\n' "$TAG" "$d" "$n" "$BOOT" \
            > "/run/box/$d.rec"
        if dd if="/run/box/$d.rec" of="/dev/$d" bs=512 count=1 \
                conv=notrunc,sync oflag=direct 2>/dev/null; then
            say wrote "$d" "$n"
        else
            say error "$d" "$n"
        fi
        usleep @INTERVAL@
    done
    rm -f "/run/box/$d.on"
}
say up
while :; do
    for dev in /dev/vd[a-z]; do
        [ -b "$dev" ] || continue
        d=${dev#/dev/}
        if [ ! -e "/run/box/$d.on" ]; then
            : > "/run/box/$d.on"
            disk_loop "$d" &
        fi
    done
    usleep @INTERVAL@
done
"""


def init_script(version, modules):
    """The ``/init`` of the image loading ``modules`` (relative paths)."""
    return (INIT_TEMPLATE.replace('@VERSION@', version)
            .replace('@MODULES@', ' '.join(modules))
            .replace('@INTERVAL@', str(INTERVAL_US)))


def initramfs_bytes(version, mods, init, busybox=BUSYBOX,
                    modules_dir=MODULES_DIR):
    """The gzip'ed newc initramfs of the guest.

    *mods*: :func:`module_paths`; *init*: :func:`init_script` of them.
    """
    plain = [_plain_name(m) for m in mods]
    raw = io.BytesIO()
    cpio = CpioWriter(raw)
    for d in ('bin', 'sbin', 'usr', 'usr/bin', 'usr/sbin', 'dev', 'proc',
              'sys', 'run', 'tmp', 'lib', 'lib/modules'):
        cpio.add_dir(d)
    cpio.add_chardev('dev/console', 5, 1)
    cpio.add_chardev('dev/null', 1, 3, perm=0o666)
    with open(busybox, 'rb') as f:
        cpio.add_file('bin/busybox', f.read(), perm=0o755)
    cpio.add_symlink('bin/sh', 'busybox')
    made = set()
    for src, dst in zip(mods, plain):
        parts = ('lib/modules/%s/%s' % (version, dst)).split('/')[:-1]
        for i in range(3, len(parts) + 1):
            d = '/'.join(parts[:i])
            if d not in made:
                made.add(d)
                cpio.add_dir(d)
        cpio.add_file('lib/modules/%s/%s' % (version, dst),
                      _read_module(os.path.join(modules_dir, version, src)))
    cpio.add_file('init', init.encode(), perm=0o755)
    cpio.close()
    return gzip.compress(raw.getvalue(), mtime=0)


def _write_atomic(path, data):
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(data)
    os.replace(tmp, path)


def build(dest_dir, version=None, busybox=BUSYBOX, boot_dir=BOOT_DIR,
          modules_dir=MODULES_DIR):
    """Build the guest into ``dest_dir``: ``(kernel_path, initramfs_path)``.

    Rebuilds only when a file is missing or the stamp (kernel version and
    a hash of ``/init``) differs.
    """
    version = version or kernel_version(boot_dir, modules_dir)
    os.makedirs(dest_dir, exist_ok=True)
    kernel = os.path.join(dest_dir, KERNEL_NAME)
    initramfs = os.path.join(dest_dir, INITRAMFS_NAME)
    stamp_path = os.path.join(dest_dir, STAMP)
    mods = module_paths(version, modules_dir)
    init = init_script(version, [_plain_name(m) for m in mods])
    stamp = {'kernel': version,
             'init_sha256': hashlib.sha256(init.encode()).hexdigest()}
    try:
        with open(stamp_path) as f:
            current = json.load(f)
    except (OSError, ValueError):
        current = None
    if (current == stamp and os.path.isfile(kernel)
            and os.path.isfile(initramfs)):
        return kernel, initramfs
    data = initramfs_bytes(version, mods, init, busybox, modules_dir)
    tmp = kernel + '.tmp'
    shutil.copyfile(os.path.join(boot_dir, 'vmlinuz-' + version), tmp)
    os.replace(tmp, kernel)
    _write_atomic(initramfs, data)
    _write_atomic(stamp_path, json.dumps(stamp).encode())
    return kernel, initramfs


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write('usage: python -m devbox.guest_image DEST\n')
        return 2
    for path in build(argv[0]):
        print(path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
