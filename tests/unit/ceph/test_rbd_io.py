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

"""How image locations and qemu's rbd: names are read and written."""

import os

import ddt
import fixtures
import testtools

from cinder_forcedetach.ceph import rbd_io
from cinder_forcedetach import image_gates


@ddt.ddt
class NamesTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(('rbd://fsid/images/abc/snap', ('fsid', 'images', 'abc',
                                              'snap')),
              ('rbd://fsid/images/a%2Fb/snap', ('fsid', 'images', 'a/b',
                                                'snap')),
              ('rbd://fsid/images/abc', None),
              ('rbd://fsid//abc/snap', None),
              ('file:///tmp/x', None),
              (None, None))
    def test_rbd_location(self, url, expected):
        self.assertEqual(expected, rbd_io.parse_rbd_location(url))

    def test_qemu_spec_escapes_and_has_no_key(self):
        spec = rbd_io.qemu_rbd_spec('volumes', 'vol:1', user='cinder',
                                    conf='/etc/ceph/c.conf',
                                    keyring='/k/ring', snapshot='s@1')
        self.assertEqual('rbd:volumes/vol\\:1@s\\@1:id=cinder:'
                         'conf=/etc/ceph/c.conf:keyring=/k/ring', spec)
        self.assertNotIn(':key=', spec)


class FakeCompletion(object):
    """A librbd completion the test completes (or the waiter does)."""

    def __init__(self, image, ret, callback):
        self.image, self.ret, self.callback = image, ret, callback
        self.done = False

    def complete(self):
        if not self.done:
            self.done = True
            self.image.in_flight -= 1
            self.image.events.append(('done', self.image.serial(self)))
            if self.callback is not None:
                self.callback(self)

    def wait_for_complete_and_cb(self):
        self.complete()

    def get_return_value(self):
        return self.ret if self.done else 0


class FakeImage(object):
    """librbd's Image as far as ImageFile writes: aio, flush, close.

    ``results`` gives the return value of each write in turn (default:
    its length); ``callbacks=False`` completes without calling back.
    """

    def __init__(self, results=(), callbacks=True):
        self.events = []
        self.completions = []
        self.in_flight = self.max_in_flight = 0
        self.results = list(results)
        self.callbacks = callbacks
        self.data = {}

    def serial(self, completion):
        return self.completions.index(completion)

    def aio_write(self, data, offset, oncomplete):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        ret = self.results.pop(0) if self.results else len(data)
        completion = FakeCompletion(self, ret, oncomplete if self.callbacks
                                    else None)
        self.completions.append(completion)
        self.events.append(('write', len(self.completions) - 1, offset))
        self.data[offset] = data
        return completion

    flush_error = None

    def flush(self):
        self.events.append(('flush', self.in_flight))
        if self.flush_error:
            raise self.flush_error

    def close(self):
        self.events.append(('close', self.in_flight))

    def size(self):
        return 1 << 30


class FakeConnection(object):
    def __init__(self, events):
        self.events = events

    def __exit__(self, *exc):
        self.events.append('disconnect')


class AioImageFileTestCase(testtools.TestCase):

    def open(self, depth=3, **kwargs):
        self.image = FakeImage(**kwargs)
        return rbd_io.ImageFile(FakeConnection(self.image.events),
                                self.image, depth=depth)

    def test_bounded_in_flight_and_in_order(self):
        f = self.open(depth=3)
        for i in range(10):
            self.assertEqual(4, f.write(b'%04d' % i))
            self.assertLessEqual(self.image.in_flight, 3)
        self.assertEqual(3, self.image.max_in_flight)
        self.assertEqual(40, f.tell())
        self.assertEqual({4 * i: b'%04d' % i for i in range(10)},
                         self.image.data)
        # the oldest write is waited for first, and only when 3 are out
        events = [e for e in self.image.events if e[0] in ('write', 'done')]
        self.assertEqual([('write', 0, 0), ('write', 1, 4), ('write', 2, 8),
                          ('done', 0), ('write', 3, 12), ('done', 1)],
                         events[:6])

    def test_flush_after_every_write_completed(self):
        f = self.open(depth=4)
        for i in range(6):
            f.write(b'x' * 10)
        f.flush()
        flush = self.image.events.index(('flush', 0))
        self.assertEqual(list(range(6)), sorted(
            e[1] for e in self.image.events[:flush] if e[0] == 'done'))
        self.assertEqual(('flush', 0), self.image.events[-1])
        f.close()
        self.assertEqual([('flush', 0), ('close', 0), 'disconnect'],
                         self.image.events[-3:])

    def test_failed_completion_fails_the_next_write(self):
        f = self.open(depth=8, results=[10, -5])
        f.write(b'a' * 10)
        f.write(b'b' * 10)
        self.image.completions[1].complete()    # librbd calls back: EIO
        err = self.assertRaises(IOError, f.write, b'c' * 10)
        self.assertEqual(5, err.errno)
        self.assertIn('10 bytes at offset 10', str(err))
        self.assertEqual(2, len(self.image.completions))   # nothing sent
        self.assertRaises(IOError, f.write, b'd')           # and stays so
        self.assertRaises(IOError, f.flush)
        self.assertNotIn('flush', [e[0] for e in self.image.events
                                   if isinstance(e, tuple)])
        f.close()       # told already: closes, waits, does not flush
        self.assertEqual([('close', 0), 'disconnect'],
                         self.image.events[-2:])

    def test_failure_seen_when_reaped_without_callback(self):
        f = self.open(depth=2, results=[-28], callbacks=False)
        f.write(b'a')
        f.write(b'b')
        self.assertRaises(IOError, f.write, b'c')     # reaps #0: ENOSPC
        self.assertEqual(2, len(self.image.completions))

    def test_flush_reports_a_failure_and_does_not_flush(self):
        f = self.open(depth=8, results=[1, 1, -5])
        for _ in range(4):
            f.write(b'z')
        err = self.assertRaises(IOError, f.flush)
        self.assertIn('at offset 2', str(err))
        self.assertEqual(0, self.image.in_flight)     # all reaped
        self.assertNotIn(('flush', 0), self.image.events)

    def test_close_waits_and_raises_an_untold_failure(self):
        f = self.open(depth=8, results=[1, -5])
        f.write(b'a')
        f.write(b'b')
        self.assertRaises(IOError, f.close)
        self.assertEqual([('close', 0), 'disconnect'],
                         self.image.events[-2:])
        f.close()       # closed: nothing more

    def test_close_closes_even_when_the_flush_fails(self):
        f = self.open()
        f.write(b'a')
        self.image.flush_error = IOError(108, 'shut down')
        self.assertRaises(IOError, f.close)
        self.assertEqual([('flush', 0), ('close', 0), 'disconnect'],
                         self.image.events[-3:])

    def test_a_write_error_fails_the_stream_and_nothing_is_done(self):
        self.image = FakeImage()
        files = []

        def open_destination():
            files.append(rbd_io.ImageFile(FakeConnection(self.image.events),
                                          self.image, depth=4))
            return files[-1]
        self.image.results = [image_gates.BLOCK_BYTES, -5]
        data = os.urandom(3 * image_gates.BLOCK_BYTES)

        class Service(object):
            def download(self, context, image_id, data_sink):
                for i in range(0, len(data), 1 << 20):
                    data_sink.write(data[i:i + (1 << 20)])
        log = self.useFixture(fixtures.FakeLogger())
        self.assertRaises(IOError, image_gates.stream_raw, None, Service(),
                          'img', 1, open_destination)
        self.assertNotIn('streamed onto the volume', log.output)
        self.assertEqual(0, self.image.in_flight)
        self.assertEqual('disconnect', self.image.events[-1])
        self.assertNotIn(('flush', 0), self.image.events)
