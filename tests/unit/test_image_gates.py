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

"""The image gates that need no volume: format inspection of a head, and
the raw sink that writes nothing before the head passed and skips zeros only
where the volume reads zeros."""

import io
import os
import random
import subprocess
import tempfile

from cinder import exception
import fixtures
from oslo_config import fixture as config_fixture
import testtools

from cinder_forcedetach.drivers import common
from cinder_forcedetach import image_gates

MiB = 1 << 20
BLOCK = image_gates.BLOCK_BYTES
GRAIN = image_gates.GRAIN_BYTES


def qemu_image(fmt, *options):
    """Bytes of a small image made by qemu-img."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'img')
        options = [o.format(tmp=tmp) for o in options]
        subprocess.run(['qemu-img', 'create', '-q', '-f', fmt] + options +
                       [path, '4M'], check=True)
        with open(path, 'rb') as f:
            return f.read()


class CheckHeadTestCase(testtools.TestCase):

    def test_raw_data_passes(self):
        self.assertTrue(image_gates.check_head('i', 'raw', os.urandom(MiB)))
        self.assertTrue(image_gates.check_head('i', 'raw', b''))

    def test_partitioned_raw_disk_passes(self):
        # an MBR (upstream's inspector and qemu-img call it raw too)
        mbr = bytearray(MiB)
        mbr[446:462] = bytes([0, 0, 2, 0, 0x83, 0, 0, 0]) + (
            (1).to_bytes(4, 'little') + (2047).to_bytes(4, 'little'))
        mbr[510:512] = b'\x55\xaa'
        self.assertTrue(image_gates.check_head('i', 'raw', bytes(mbr)))

    def test_qcow2_declared_raw_is_refused(self):
        err = self.assertRaises(exception.ImageUnacceptable,
                                image_gates.check_head, 'i', 'raw',
                                qemu_image('qcow2'))
        self.assertIn('declared raw but its data is qcow2', str(err))

    def test_declared_format_must_match(self):
        self.assertTrue(image_gates.check_head('i', 'qcow2',
                                               qemu_image('qcow2')))
        self.assertRaises(exception.ImageUnacceptable, image_gates.check_head,
                          'i', 'vmdk', qemu_image('qcow2'))

    def test_qcow2_backing_or_data_file_is_refused(self):
        for options in (['-b', '/etc/hostname', '-F', 'raw'],
                        ['-o', 'data_file={tmp}/data']):
            err = self.assertRaises(exception.ImageUnacceptable,
                                    image_gates.check_head, 'i', 'qcow2',
                                    qemu_image('qcow2', *options))
            self.assertIn('Safety checks failed', str(err))

    def test_head_too_short_to_settle_a_format(self):
        vhdx = qemu_image('vhdx')
        self.assertFalse(image_gates.check_head('i', 'vhdx', vhdx[:64 * 1024]))


class RawSinkTestCase(testtools.TestCase):

    def sink(self, size_gb=1):
        self.opened = []

        def open_destination():
            self.opened.append(io.BytesIO())
            self.opened[-1].close = lambda: None
            return self.opened[-1]
        return image_gates._RawSink('i', size_gb, open_destination)

    def test_nothing_written_before_the_head_passed(self):
        sink = self.sink()
        qcow2 = qemu_image('qcow2')
        sink.write(qcow2)
        self.assertEqual([], self.opened)
        self.assertRaises(exception.ImageUnacceptable, sink.finish)
        self.assertEqual([], self.opened)

    def test_raw_written_whole(self):
        sink = self.sink()
        data = os.urandom(3 * MiB + 5)
        for i in range(0, len(data), 65536):
            sink.write(data[i:i + 65536])
        sink.finish()
        self.assertEqual(data, self.opened[0].getvalue())

    def test_stream_longer_than_the_volume_is_cut_off(self):
        sink = self.sink(size_gb=0)
        self.assertRaises(exception.ImageTooBig, sink.write, b'x')
        self.assertEqual([], self.opened)


class VolumeFile(object):
    """A volume's file object: logs writes and seeks into *events*."""

    def __init__(self, events, content):
        self.events = events
        self.content = content
        self.pos = 0

    def seek(self, offset):
        self.events.append(('seek', offset))
        self.pos = offset

    def write(self, data):
        self.events.append(('write', self.pos, len(data)))
        self.content[self.pos:self.pos + len(data)] = data
        self.pos += len(data)

    def flush(self):
        pass

    def close(self):
        self.events.append('close')


class ZeroSkippingTestCase(testtools.TestCase):

    def stream(self, data, chunk=MiB, sparse=False, discard=False,
               old=b'\xee'):
        """Stream *data*; returns (events, the volume's content)."""
        self.events = events = []
        self.content = content = bytearray(old * len(data))

        def open_destination():
            events.append('open')
            return VolumeFile(events, content)

        def discarder():
            events.append('discard')
            content[:] = bytes(len(content))
            return True
        sink = image_gates._RawSink('i', 1, open_destination, sparse=sparse,
                                    discard=discarder if discard else None)
        try:
            for i in range(0, len(data), chunk):
                sink.write(data[i:i + chunk])
            sink.finish()
        finally:
            sink.close()
        return events, bytes(content)

    def image(self):
        """Data, a zero block, data in grains 1 and 3 of a block, zeros."""
        data = bytearray(3 * BLOCK + 5)
        data[0:10] = b'x' * 10
        data[2 * BLOCK + GRAIN:2 * BLOCK + GRAIN + 1] = b'y'
        data[2 * BLOCK + 3 * GRAIN + 7:2 * BLOCK + 4 * GRAIN] = b'z' * (
            GRAIN - 7)
        return bytes(data)

    def test_zeros_skipped_on_a_new_volume(self):
        data = self.image()
        for chunk in (64 * 1024, MiB, 5 * MiB):     # buffered into blocks
            events, content = self.stream(data, chunk, sparse=True, old=b'\0')
            self.assertEqual(data, content)
            self.assertEqual(['open',
                              ('write', 0, GRAIN),
                              ('seek', 2 * BLOCK + GRAIN),
                              ('write', 2 * BLOCK + GRAIN, GRAIN),
                              ('seek', 2 * BLOCK + 3 * GRAIN),
                              ('write', 2 * BLOCK + 3 * GRAIN, GRAIN),
                              'close'], events)

    def test_discard_after_the_head_check_and_before_any_write(self):
        data = self.image()
        events, content = self.stream(data, discard=True)
        self.assertEqual(data, content)         # no old byte left
        self.assertEqual(['discard', 'open', ('write', 0, GRAIN)],
                         events[:3])
        self.assertEqual(1, events.count('discard'))
        self.assertEqual(3, len([e for e in events if e[0] == 'write']))

    def test_refused_head_discards_and_writes_nothing(self):
        qcow2 = qemu_image('qcow2') + bytes(BLOCK)
        for sparse, discard in ((True, False), (False, True)):
            self.assertRaises(exception.ImageUnacceptable, self.stream,
                              qcow2, sparse=sparse, discard=discard)
            self.assertEqual([], self.events)
            self.assertEqual(b'\xee' * len(qcow2), self.content)
        # a head shorter than HEAD_BYTES: refused at the end of the stream
        events = []
        sink = image_gates._RawSink('i', 1, lambda: events.append('open'),
                                    discard=lambda: events.append('discard'))
        sink.write(qemu_image('qcow2')[:64 * 1024])
        self.assertRaises(exception.ImageUnacceptable, sink.finish)
        self.assertEqual([], events)

    def test_zeros_written_where_the_volume_may_hold_old_data(self):
        data = self.image()
        for chunk in (64 * 1024, MiB):
            events, content = self.stream(data, chunk)
            self.assertEqual(data, content)
            self.assertEqual(['open', ('write', 0, BLOCK),
                              ('write', BLOCK, BLOCK),
                              ('write', 2 * BLOCK, BLOCK),
                              ('write', 3 * BLOCK, 5), 'close'], events)

    def test_any_chunking_writes_only_non_zero_grains(self):
        rnd = random.Random(7)
        grains = 3 * BLOCK // GRAIN + 5
        data = bytearray(grains * GRAIN + 333)
        non_zero = set(rnd.sample(range(grains), grains // 4))
        for g in non_zero:
            data[g * GRAIN + rnd.randrange(GRAIN)] = 1 + rnd.randrange(255)
        data[-1] = 9
        non_zero.add(grains)
        data = bytes(data)
        for _ in range(6):
            chunks, at = [], 0
            while at < len(data):
                size = rnd.choice((1, 4095, GRAIN - 1, GRAIN + 7, MiB + 3,
                                   5 * MiB))
                chunks.append(data[at:at + size])
                at += size
            self.events = events = []
            content = bytearray(len(data))
            sink = image_gates._RawSink(
                'i', 1, lambda: VolumeFile(events, content), sparse=True)
            for chunk in chunks:
                sink.write(chunk)
            sink.finish()
            self.assertEqual(data, bytes(content))
            written = set()
            for event in events:
                if event[0] == 'write':
                    written.update(range(event[1] // GRAIN,
                                         (event[1] + event[2] - 1) // GRAIN
                                         + 1))
            self.assertEqual(non_zero, written)

    def test_file_volume_discard_keeps_the_size(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(b'old' * 1000)
            f.flush()

            class Driver(object):
                local_path = staticmethod(lambda volume: f.name)
            self.assertTrue(common.FileVolumeDriver.discard_volume(
                Driver(), None))
            self.assertEqual(3000, os.path.getsize(f.name))
            with open(f.name, 'rb') as g:
                self.assertEqual(bytes(3000), g.read())
            self.assertEqual(0, os.stat(f.name).st_blocks)


class LocalFileHolesTestCase(testtools.TestCase):
    """A local file's holes are neither read nor (after discard) written.

    The holes are what SEEK_DATA/SEEK_HOLE tell; the gates stay as they are.
    """

    def sparse_file(self, extents, size):
        """A file of *size* bytes holding ``{offset: data}``, holes else."""
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'img')
        with open(path, 'wb') as f:
            f.truncate(size)
            for offset, data in extents.items():
                f.seek(offset)
                f.write(data)
        return path

    def copy(self, path, size_gb=1, sparse=False, discard=False, old=b'\xee'):
        """copy_file into a _RawSink; (events, content, bytes fed)."""
        size = os.path.getsize(path)
        self.events = events = []
        content = bytearray(old * size)
        fed = []

        def open_destination():
            events.append('open')
            return VolumeFile(events, content)

        def discarder():
            events.append('discard')
            content[:] = bytes(len(content))
            return True
        sink = image_gates._RawSink('i', size_gb, open_destination,
                                    sparse=sparse,
                                    discard=discarder if discard else None)
        write = sink.write
        sink.write = lambda data: (fed.append(len(data)), write(data))[1]
        try:
            image_gates.copy_file(path, sink)
            sink.finish()
        finally:
            sink.close()
        return events, bytes(content[:size]), sum(fed)

    def extents(self):
        return {0: b'H' * MiB, 9 * MiB: b'D' * GRAIN,
                13 * MiB + 4096: b'E' * 4096}

    def expected(self, extents, size):
        data = bytearray(size)
        for offset, chunk in extents.items():
            data[offset:offset + len(chunk)] = chunk
        return bytes(data)

    def test_holes_neither_read_nor_written_after_discard(self):
        extents, size = self.extents(), 16 * MiB
        path = self.sparse_file(extents, size)
        events, content, fed = self.copy(path, discard=True)
        self.assertEqual(self.expected(extents, size), content)
        writes = [e for e in events if e[0] == 'write']
        self.assertEqual(['discard', 'open'], events[:2])
        self.assertEqual(sum(len(c) for c in extents.values()),
                         sum(w[2] for w in writes))
        # read: the data extents, not the holes (file system blocks)
        self.assertLess(fed, 2 * MiB)

    def test_holes_written_as_zeros_without_discard(self):
        extents, size = self.extents(), 16 * MiB
        path = self.sparse_file(extents, size)
        events, content, fed = self.copy(path)
        self.assertEqual(self.expected(extents, size), content)   # no old
        self.assertEqual(size, sum(e[2] for e in events if e[0] == 'write'))

    def test_head_in_a_hole_is_inspected(self):
        extents, size = {8 * MiB: b'D' * MiB}, 12 * MiB
        events, content, fed = self.copy(self.sparse_file(extents, size),
                                         sparse=True, old=b'\0')
        self.assertEqual(self.expected(extents, size), content)
        # the head's zeros are made for the inspector, then skipped
        self.assertEqual([('seek', 8 * MiB), ('write', 8 * MiB, MiB)],
                         [e for e in events if e[0] in ('write', 'seek')])

    def test_qcow2_head_of_a_sparse_file_is_refused(self):
        path = self.sparse_file({0: qemu_image('qcow2')}, 64 * MiB)
        self.assertRaises(exception.ImageUnacceptable, self.copy, path,
                          discard=True)
        self.assertEqual([], self.events)

    def test_holes_count_against_the_volume_size(self):
        path = self.sparse_file({0: b'H' * 4096}, (1 << 30) + 4096)
        events = []
        sink = image_gates._RawSink(
            'i', 1, lambda: VolumeFile(events, bytearray()), sparse=True)
        self.assertRaises(exception.ImageTooBig, image_gates.copy_file, path,
                          sink)
        self.assertEqual([('write', 0, 4096)], events)

    def test_local_source_follows_upstreams_rule(self):
        conf = self.useFixture(config_fixture.Config(image_gates.CONF))

        class Service(object):
            temp_images = None
            locations = [{'url': 'http://glance/x'},
                         {'url': 'file:///srv/images/x'}]

            def get_location(self, context, image_id):
                return None, self.locations
        service = Service()
        self.assertIsNone(image_gates.local_source(None, service, 'x'))
        conf.config(allowed_direct_url_schemes=['file'])
        self.assertEqual('/srv/images/x',
                         image_gates.local_source(None, service, 'x'))
        service.locations = [{'url': 'http://glance/x'}]
        self.assertIsNone(image_gates.local_source(None, service, 'x'))

        class Fetched(object):
            def get(self, context, image_id):
                return '/tmp/fetched'
        service.temp_images = Fetched()
        self.assertEqual('/tmp/fetched',
                         image_gates.local_source(None, service, 'x'))
