"""The image gates that need no volume: format inspection of a head, and
the raw sink that writes nothing before the head passed."""

import io
import os
import subprocess
import tempfile

from cinder import exception
import testtools

from cinder_forcedetach import image

MiB = 1 << 20


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
        self.assertTrue(image.check_head('i', 'raw', os.urandom(MiB)))
        self.assertTrue(image.check_head('i', 'raw', b''))

    def test_partitioned_raw_disk_passes(self):
        # an MBR (upstream's inspector and qemu-img call it raw too)
        mbr = bytearray(MiB)
        mbr[446:462] = bytes([0, 0, 2, 0, 0x83, 0, 0, 0]) + (
            (1).to_bytes(4, 'little') + (2047).to_bytes(4, 'little'))
        mbr[510:512] = b'\x55\xaa'
        self.assertTrue(image.check_head('i', 'raw', bytes(mbr)))

    def test_qcow2_declared_raw_is_refused(self):
        err = self.assertRaises(exception.ImageUnacceptable,
                                image.check_head, 'i', 'raw',
                                qemu_image('qcow2'))
        self.assertIn('declared raw but its data is qcow2', str(err))

    def test_declared_format_must_match(self):
        self.assertTrue(image.check_head('i', 'qcow2', qemu_image('qcow2')))
        self.assertRaises(exception.ImageUnacceptable, image.check_head,
                          'i', 'vmdk', qemu_image('qcow2'))

    def test_qcow2_backing_or_data_file_is_refused(self):
        for options in (['-b', '/etc/hostname', '-F', 'raw'],
                        ['-o', 'data_file={tmp}/data']):
            err = self.assertRaises(exception.ImageUnacceptable,
                                    image.check_head, 'i', 'qcow2',
                                    qemu_image('qcow2', *options))
            self.assertIn('Safety checks failed', str(err))

    def test_head_too_short_to_settle_a_format(self):
        vhdx = qemu_image('vhdx')
        self.assertFalse(image.check_head('i', 'vhdx', vhdx[:64 * 1024]))


class RawSinkTestCase(testtools.TestCase):

    def sink(self, size_gb=1):
        self.opened = []

        def open_destination():
            self.opened.append(io.BytesIO())
            self.opened[-1].close = lambda: None
            return self.opened[-1]
        return image._RawSink('i', size_gb, open_destination)

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
