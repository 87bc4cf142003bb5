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

"""The guest image's cpio writer, records and build (no qemu)."""

import gzip
import io
import lzma
import os
import stat

import fixtures
import testtools

from devbox import guest_image


def parse_newc(data):
    """An independent newc reader: {name: (mode, data, rdev, nlink)}."""
    out = {}
    pos = 0
    while True:
        assert pos % 4 == 0, pos
        hdr = data[pos:pos + 110]
        assert hdr[:6] == b'070701', hdr[:6]
        f = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        namesize, size = f[11], f[6]
        name = data[pos + 110:pos + 110 + namesize]
        assert name.endswith(b'\0')
        name = name[:-1].decode()
        pos = (pos + 110 + namesize + 3) & ~3
        body = data[pos:pos + size]
        pos = (pos + size + 3) & ~3
        if name == 'TRAILER!!!':
            assert pos == len(data), (pos, len(data))
            return out
        out[name] = (f[1], body, (f[9], f[10]), f[4])


class CpioWriterTestCase(testtools.TestCase):

    def _archive(self):
        buf = io.BytesIO()
        w = guest_image.CpioWriter(buf)
        w.add_dir('bin')
        w.add_file('bin/busybox', b'\x7fELF' + b'x' * 1001, perm=0o755)
        w.add_symlink('bin/sh', 'busybox')
        w.add_chardev('dev/console', 5, 1)
        w.add_file('/init', b'#!/bin/sh\n', perm=0o755)
        w.add_file('empty', b'')
        w.close()
        return buf.getvalue()

    def test_names_modes_and_contents_parse_back(self):
        entries = parse_newc(self._archive())
        self.assertEqual(['bin', 'bin/busybox', 'bin/sh', 'dev/console',
                          'init', 'empty'], list(entries))
        self.assertEqual(stat.S_IFDIR | 0o755, entries['bin'][0])
        self.assertEqual(2, entries['bin'][3])
        self.assertEqual(stat.S_IFREG | 0o755, entries['bin/busybox'][0])
        self.assertEqual(b'\x7fELF' + b'x' * 1001, entries['bin/busybox'][1])
        self.assertEqual(stat.S_IFLNK | 0o777, entries['bin/sh'][0])
        self.assertEqual(b'busybox', entries['bin/sh'][1])
        self.assertEqual(stat.S_IFCHR | 0o600, entries['dev/console'][0])
        self.assertEqual((5, 1), entries['dev/console'][2])
        self.assertEqual(b'#!/bin/sh\n', entries['init'][1])
        self.assertEqual((stat.S_IFREG | 0o644, b''),
                         entries['empty'][:2])

    def test_module_reader_agrees(self):
        data = self._archive()
        mine = [(n, m, d, r) for n, (m, d, r, _l) in parse_newc(data).items()]
        self.assertEqual(mine, guest_image.read_cpio(data))

    def test_inodes_are_unique(self):
        data = self._archive()
        inos = []
        pos = 0
        for _ in range(7):
            inos.append(int(data[pos + 6:pos + 14], 16))
            namesize = int(data[pos + 94:pos + 102], 16)
            size = int(data[pos + 54:pos + 62], 16)
            pos = (pos + 110 + namesize + 3) & ~3
            pos = (pos + size + 3) & ~3
        self.assertEqual(len(inos), len(set(inos)))

    def test_no_entry_after_close(self):
        w = guest_image.CpioWriter(io.BytesIO())
        w.close()
        self.assertRaises(ValueError, w.add_dir, 'x')


class RecordTestCase(testtools.TestCase):

    def test_parse_nul_padded(self):
        data = b'BOXGUEST g1 vdb 42\n'.ljust(512, b'\0')
        self.assertEqual(('g1', 'vdb', 42, None),
                         guest_image.parse_record(data))

    def test_parse_space_padded(self):
        data = b'BOXGUEST guest vda 7\n'.ljust(512, b' ')
        self.assertEqual(('guest', 'vda', 7, None),
                         guest_image.parse_record(data))

    def test_make_record_round_trips(self):
        data = guest_image.make_record('t', 'vdc', 3)
        self.assertEqual(512, len(data))
        self.assertEqual(('t', 'vdc', 3, None),
                         guest_image.parse_record(data))

    def test_the_boot_tells_two_boots_of_one_guest_apart(self):
        record = guest_image.parse_record(
            guest_image.make_record('t', 'vdc', 3, '0a1b2c3d'))
        self.assertEqual('0a1b2c3d', record.boot)
        self.assertEqual(3, record.counter)
        self.assertIn('"$BOOT"', guest_image.init_script('6.1', []))
        self.assertIn('/proc/sys/kernel/random/boot_id',
                      guest_image.init_script('6.1', []))

    def test_garbage_is_none(self):
        for data in (b'', b'\0' * 512, b'BOXGUEST\n', b'BOXGUEST a b\n',
                     b'BOXGUEST a b c\n', b'BOXGUEST a b -1\n',
                     b'BOXGUESTX a b 1\n', b'xBOXGUEST a b 1\n',
                     b'BOXGUEST a b 1 2\n', b'BOXGUEST a b 1 0A1B2C3D\n',
                     b'BOXGUEST a b 1 0a1b2c3d e\n',
                     b'BOXGUEST a \xff 1\n'):
            self.assertIsNone(guest_image.parse_record(data), data)

    def test_read_record_reads_the_first_512_bytes(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'd')
        with open(path, 'wb') as f:
            f.write(guest_image.make_record('x', 'vda', 9) + b'y' * 4096)
        self.assertEqual(('x', 'vda', 9, None), guest_image.read_record(path))

    def test_cmdline(self):
        self.assertIn('console=ttyS0', guest_image.cmdline('t1'))
        self.assertIn('boxtag=t1', guest_image.cmdline('t1').split())
        self.assertIn('boxtag=guest', guest_image.cmdline().split())
        self.assertRaises(ValueError, guest_image.cmdline, 'a b')


class BuildTestCase(testtools.TestCase):
    """build() on a fake /boot, /lib/modules and busybox."""

    VER = '6.1.0-9-amd64'

    def setUp(self):
        super().setUp()
        self.root = self.useFixture(fixtures.TempDir()).path
        self.boot = os.path.join(self.root, 'boot')
        self.mods = os.path.join(self.root, 'modules')
        moddir = os.path.join(self.mods, self.VER)
        os.makedirs(self.boot)
        with open(os.path.join(self.boot, 'vmlinuz-' + self.VER), 'wb') as f:
            f.write(b'KERNEL')
        v = 'kernel/drivers/virtio/'
        files = {v + 'virtio.ko.xz': [v + 'virtio_ring.ko.xz'],
                 v + 'virtio_ring.ko.xz': [],
                 v + 'virtio_pci_legacy_dev.ko.xz': [],
                 v + 'virtio_pci_modern_dev.ko.xz': [],
                 v + 'virtio_pci.ko.xz': [v + 'virtio_pci_legacy_dev.ko.xz',
                                          v + 'virtio_pci_modern_dev.ko.xz',
                                          v + 'virtio.ko.xz',
                                          v + 'virtio_ring.ko.xz'],
                 v + 'virtio_net.ko.xz': [v + 'virtio.ko.xz'],
                 'kernel/drivers/block/virtio_blk.ko.xz': [
                     v + 'virtio.ko.xz', v + 'virtio_ring.ko.xz']}
        os.makedirs(os.path.join(moddir, 'kernel/drivers/virtio'))
        os.makedirs(os.path.join(moddir, 'kernel/drivers/block'))
        with open(os.path.join(moddir, 'modules.dep'), 'w') as dep:
            for mod, deps in files.items():
                dep.write('%s: %s\n' % (mod, ' '.join(deps)))
                with open(os.path.join(moddir, mod), 'wb') as f:
                    f.write(lzma.compress(b'ELF ' + mod.encode()))
        self.busybox = os.path.join(self.root, 'busybox')
        with open(self.busybox, 'wb') as f:
            f.write(b'BUSYBOX')
        self.dest = os.path.join(self.root, 'out')

    def _build(self):
        return guest_image.build(self.dest, busybox=self.busybox,
                                 boot_dir=self.boot, modules_dir=self.mods)

    def test_image(self):
        kernel, initramfs = self._build()
        with open(kernel, 'rb') as f:
            self.assertEqual(b'KERNEL', f.read())
        with open(initramfs, 'rb') as f:
            entries = parse_newc(gzip.decompress(f.read()))
        self.assertEqual(b'BUSYBOX', entries['bin/busybox'][1])
        self.assertEqual(stat.S_IFCHR | 0o600, entries['dev/console'][0])
        prefix = 'lib/modules/%s/' % self.VER
        mods = [n[len(prefix):] for n in entries
                if n.startswith(prefix) and n.endswith('.ko')]
        names = [os.path.basename(m)[:-3] for m in mods]
        # Dependencies first, nothing unwanted, decompressed.
        self.assertEqual(['virtio_ring', 'virtio', 'virtio_pci_legacy_dev',
                          'virtio_pci_modern_dev', 'virtio_pci',
                          'virtio_blk'], names)
        self.assertEqual(b'ELF ' + mods[0].encode() + b'.xz',
                         entries[prefix + mods[0]][1])
        init_mode, init, _r, _n = entries['init']
        self.assertEqual(stat.S_IFREG | 0o755, init_mode)
        init = init.decode()
        self.assertTrue(init.startswith('#!/bin/sh\n'))
        self.assertIn('for m in %s; do' % ' '.join(mods), init)
        self.assertIn('oflag=direct', init)
        self.assertNotIn('@', init)

    def test_idempotent(self):
        kernel, initramfs = self._build()
        os.utime(initramfs, ns=(1, 1))
        self.assertEqual((kernel, initramfs), self._build())
        self.assertEqual(1, os.stat(initramfs).st_mtime_ns)
        os.unlink(kernel)
        self._build()
        self.assertTrue(os.path.exists(kernel))
        self.assertNotEqual(1, os.stat(initramfs).st_mtime_ns)

    def test_stale_stamp_rebuilds(self):
        _kernel, initramfs = self._build()
        os.utime(initramfs, ns=(1, 1))
        with open(os.path.join(self.dest, guest_image.STAMP), 'w') as f:
            f.write('{"kernel": "old"}')
        self._build()
        self.assertNotEqual(1, os.stat(initramfs).st_mtime_ns)
