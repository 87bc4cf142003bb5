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


"""The shared test fakes behave as the tests using them rely on."""

import io
import os
import socket
import sqlite3

import ddt
import fixtures
import testtools

from cinder import exception
from tests import fakes


class FreePortsTestCase(testtools.TestCase):

    def assertBindable(self, addr, port):
        with socket.socket() as s:
            s.bind((addr, port))

    def test_free_tcp_port(self):
        self.assertBindable('127.0.0.1', fakes.free_tcp_port())

    def test_free_on_every_address(self):
        port = fakes.free_tcp_port('127.0.0.1', also_on=('127.0.0.2',))
        self.assertBindable('127.0.0.1', port)
        self.assertBindable('127.0.0.2', port)

    def test_distinct(self):
        ports = fakes.free_tcp_ports(4)
        self.assertEqual(4, len(set(ports)))

    def test_pairs_below_the_ephemeral_range(self):
        ports = fakes.free_tcp_ports(5, span=2, below_ephemeral=True)
        self.assertEqual(5, len(set(ports)))
        for port in ports:
            self.assertTrue(20000 <= port < 32000 and port % 2 == 0, port)
            self.assertNotIn(port + 1, ports)
            self.assertBindable('127.0.0.1', port + 1)

    def test_a_box_with_etcd_members_gets_their_ports(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        self.useFixture(fixtures.MockPatchObject(
            fakes, 'PORT_RESERVATIONS', os.path.join(tmp, 'reserved')))
        env = fakes.box_env(os.path.join(tmp, 'box'), etcd=True,
                            etcd_members=3)
        members = [int(p) for p in env['STACK_ETCD_MEMBER_PORTS'].split(',')]
        self.assertEqual('3', env['STACK_ETCD_MEMBERS'])
        self.assertEqual(3, len(set(members)))
        self.assertNotIn(int(env['STACK_ETCD_PORT']), members)
        self.assertFalse([k for k in env if k.startswith('STACK_ETCD_MEMBER_')
                          and k.endswith('_PORT')])

    def test_boxes_never_share_a_port(self):
        """Ports picked at once for two boxes: disjoint, until one goes."""
        tmp = self.useFixture(fixtures.TempDir()).path
        self.useFixture(fixtures.MockPatchObject(
            fakes, 'PORT_RESERVATIONS', os.path.join(tmp, 'reserved')))
        box1, box2 = os.path.join(tmp, 'box1'), os.path.join(tmp, 'box2')
        os.mkdir(box1)
        os.mkdir(box2)
        self.assertTrue(fakes._reserve(20000, box1))
        self.assertFalse(fakes._reserve(20000, box2))
        # Free to bind, but taken: box2 never gets it.
        self.useFixture(fixtures.MockPatchObject(
            fakes.random, 'randrange', side_effect=[20000, 20000, 20002]))
        self.assertEqual([20002], fakes.free_tcp_ports(
            1, span=2, below_ephemeral=True, owner=box2))
        # box1 purged (its directory gone): its ports are free again.
        os.rmdir(box1)
        self.assertTrue(fakes._reserve(20000, box2))
        # A reservation of a box still there lapses after a while.
        self.assertFalse(fakes._reserve(20002, box1))
        path = os.path.join(tmp, 'reserved', '20002')
        old = os.stat(path).st_mtime - fakes.RESERVATION_SECONDS - 1
        os.utime(path, (old, old))
        os.mkdir(box1)
        self.assertTrue(fakes._reserve(20002, box1))

    def test_tgtd_control_port_has_no_socket(self):
        port = fakes.free_tgtd_control_port()
        self.assertFalse(os.path.exists(os.path.join(
            fakes.TGTD_SOCKET_DIR, 'socket.%d' % port)))


class _Sink(object):
    """A writable file behind a proxy, as upstream's fetch hands it."""

    def __init__(self, obj):
        self._obj = obj

    def write(self, data):
        self._obj.write(data)


class FakeImageServiceTestCase(testtools.TestCase):

    def setUp(self):
        super(FakeImageServiceTestCase, self).setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'img')
        self.data = b'x' * (fakes.MiB + 512)
        with open(self.path, 'wb') as f:
            f.write(self.data)

    def test_file_image(self):
        images = fakes.FakeImageService(file_locations=True)
        image_id = images.add('img', path=self.path, disk_format='qcow2')
        self.assertEqual('img', image_id)
        meta = images.show(None, 'img')
        self.assertEqual(('img', 'qcow2', len(self.data), 'active'),
                         (meta['id'], meta['disk_format'], meta['size'],
                          meta['status']))
        self.assertNotIn('virtual_size', meta)
        url = 'file://' + self.path
        self.assertEqual((url, [{'url': url, 'metadata': {}}]),
                         images.get_location(None, 'img'))
        self.assertEqual(self.data, b''.join(images.download(None, 'img')))
        sink = io.BytesIO()
        self.assertIsNone(images.download(None, 'img', _Sink(sink)))
        self.assertEqual(self.data, sink.getvalue())
        self.assertEqual([('img', 'NoneType'),
                          ('img', 'BytesIO')], images.downloads)
        self.assertEqual(2 * len(self.data), images.served)

    def test_no_location(self):
        images = fakes.FakeImageService()
        images.add('img', path=self.path)
        self.assertEqual((None, []), images.get_location(None, 'img'))

    def test_location_override_and_given_url(self):
        images = fakes.FakeImageService(file_locations=True)
        images.add('a', path=self.path, url='rbd://f/p/a/snap')
        images.add('b', path=self.path)
        images.locations['b'] = 'file:///etc/other'
        self.assertEqual('rbd://f/p/a/snap', images.url('a'))
        self.assertEqual('file:///etc/other', images.url('b'))

    def test_reader_image(self):
        images = fakes.FakeImageService()
        images.add('r', size=6, reader=lambda: iter([b'abc', b'def']))
        self.assertEqual(6, images.show(None, 'r')['size'])
        self.assertEqual(b'abcdef', b''.join(images.download(None, 'r')))

    def test_served_directory(self):
        server = type('Server', (), {'directory': self.dir,
                                     'url': 'http://127.0.0.1:1'})
        images = fakes.FakeImageService(server=server,
                                        declare_virtual_size=True)
        image_id = images.add(path=self.path, name='served')
        self.assertTrue(os.path.exists(os.path.join(self.dir, image_id)))
        meta = images.show(None, image_id)
        self.assertEqual('served', meta['name'])
        self.assertEqual(len(self.data), meta['virtual_size'])
        self.assertEqual('http://127.0.0.1:1/' + image_id,
                         images.get_location(None, image_id)[0])

    def test_unknown_image(self):
        images = fakes.FakeImageService()
        for call in (images.show, images.get_location, images.download):
            self.assertRaises(exception.ImageNotFound, call, None, 'nope')

    def test_update_keeps_the_upload(self):
        images = fakes.FakeImageService()
        images.add('u')
        images.update(None, 'u', {}, io.BytesIO(self.data))
        self.assertEqual(self.data, images.uploads['u'])

    def test_glance_download(self):
        images = fakes.FakeImageService(file_locations=True,
                                        glance_download=True)
        images.add('img', path=self.path)
        sink = io.BytesIO()
        images.download(None, 'img', sink)
        self.assertEqual(self.data, sink.getvalue())
        self.assertEqual(len(self.data), images.served)   # not read directly
        self.assertRaises(NotImplementedError, images.call, None, 'get',
                          'img')


class ArrayLockedTestCase(testtools.TestCase):

    def test_locked_then_released(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'db')
        sqlite3.connect(path).close()
        with fakes.array_locked(path):
            conn = sqlite3.connect(path, timeout=0.05)
            self.assertRaises(sqlite3.OperationalError, conn.execute,
                              'CREATE TABLE t (x)')
            conn.close()
        conn = sqlite3.connect(path, timeout=0.05)
        conn.execute('CREATE TABLE t (x)')
        conn.close()


@ddt.ddt
class EmulatedScanWritesTestCase(testtools.TestCase):
    """The emulated FC kernel splits scan writes a FIFO has merged."""

    @ddt.unpack
    @ddt.data(('0 0 1', [['0', '0', '1']]),
              ('0 0 10 1 1', [['0', '0', '1'], ['0', '1', '1']]),
              ('0 0 120 1 12', [['0', '0', '12'], ['0', '1', '12']]),
              ('- - 3- - 4', [['-', '-', '3'], ['-', '-', '4']]),
              ('0 0 1\n0 1 1\n', [['0', '0', '1'], ['0', '1', '1']]),
              ('', []), ('0 0', []))
    def test_split(self, data, expected):
        self.assertEqual(expected, fakes.split_scan_writes(data))
