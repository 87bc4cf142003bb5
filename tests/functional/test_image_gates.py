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

"""Cinder's own image gates in front of every image our drivers write.

Real Cinder services in-process with the tgt driver (see
:mod:`tests.functional.test_api_flows`); the image service runs
upstream's own ``GlanceImageService.download`` (so a ``file://`` location
is read only when ``allowed_direct_url_schemes`` has ``file``) over image
files served as Glance would serve their data.  Each crafted image goes
through ``os-reimage`` of a volume holding old data and through create
from image; a refused one leaves the old data intact, never lets the host
file (standing in for the node's ``cinder.conf``) reach the volume, and
says why.
"""

import os
import subprocess

import fixtures

from tests import fakes
from tests.functional import test_api_flows

MiB = 1 << 20
GiB = 1 << 30
SECRET = b'[database]\nconnection = mysql://cinder:HOST-SECRET@db/cinder\n'
OLD = b'OLD-VOLUME-DATA!'


def run(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


class ImageGatesTestCase(test_api_flows.ApiFlowTestCase):

    def setUp(self):
        super(ImageGatesTestCase, self).setUp()
        self.log = self.useFixture(fixtures.FakeLogger())
        self.work = self.useFixture(fixtures.TempDir()).path
        # the node's cinder.conf, as far as the volume could tell
        self.secret = self.path('cinder.conf')
        with open(self.secret, 'wb') as f:
            f.write((SECRET * (MiB // len(SECRET) + 1))[:MiB])

    def path(self, name):
        return os.path.join(self.work, name)

    def image_service(self):
        """The test image service with Glance's own ``download()``.

        ``get_location`` returns a per-image override
        (``self.images.locations``) or the HTTP URL; ``download`` is
        upstream's code, whose data request (``self._client.call(context,
        'data', id)``) returns the served file.
        """
        return fakes.FakeImageService(server=self.image_server,
                                      declare_virtual_size=True,
                                      glance_download=True)

    def add(self, path, disk_format, **kwargs):
        return self.add_image(os.path.basename(path), path, disk_format,
                              **kwargs)

    # -- the two ways an image reaches a volume ------------------------------

    def old_volume(self):
        vol_id = self.create_volume()['id']
        with open(self.volume_path(vol_id), 'r+b') as f:
            f.write(OLD * (2 * MiB // len(OLD)))
        return vol_id

    def volume_path(self, vol_id):
        return self.driver.local_path(self.db_volume(vol_id))

    def head(self, vol_id, length=2 * MiB):
        with open(self.volume_path(vol_id), 'rb') as f:
            return f.read(length)

    def reimage(self, vol_id, image_id):
        self.request('POST', '/volumes/%s/action' % vol_id,
                     {'os-reimage': {'image_id': image_id}}, expect=202)
        return self.wait_volume(vol_id, ('available', 'error'))['status']

    def assert_refused(self, image_id, reason):
        """Reimage and create from image fail; nothing of the host leaks."""
        vol_id = self.old_volume()
        status = self.reimage(vol_id, image_id)
        self.assert_no_secret(vol_id)
        self.assert_head(vol_id, OLD * (2 * MiB // len(OLD)),
                         'the refused image touched the old data')
        self.assertEqual('error', status)
        self.assertIn(reason, self.log.output)
        vol = self.create_volume(imageRef=image_id)
        if os.path.exists(self.volume_path(vol['id'])):
            self.assert_no_secret(vol['id'])
        self.assertEqual('error', vol['status'])

    def assert_head(self, vol_id, expected, msg='unexpected content'):
        head = self.head(vol_id, len(expected))
        same = len(os.path.commonprefix([head, expected]))
        self.assertEqual(len(expected), same, '%s from byte %d: %r' % (
            msg, same, head[same:same + 48]))

    def assert_no_secret(self, vol_id):
        self.assertNotIn(b'HOST-SECRET', self.head(vol_id),
                         'the host file reached the volume')

    # -- refused -------------------------------------------------------------

    def test_file_location_of_a_host_file_is_not_read(self):
        # Glance says the image lives in the node's cinder.conf; its data
        # (what Glance serves) is a plain raw image.
        image_id = self.add(test_api_flows.make_image(
            self.work, 'plain', 0xb7, 4 * MiB, fmt='raw'), 'raw')
        self.images.locations[image_id] = 'file://' + self.secret
        vol_id = self.old_volume()
        self.assertEqual('available', self.reimage(vol_id, image_id))
        self.assert_no_secret(vol_id)
        self.assert_head(vol_id, b'\xb7' * MiB)
        vol = self.create_volume(imageRef=image_id)
        self.assert_no_secret(vol['id'])
        self.assertEqual('available', vol['status'])
        self.assert_head(vol['id'], b'\xb7' * MiB)

    def test_qcow2_backing_file_on_the_host(self):
        img = self.path('backing.qcow2')
        run('qemu-img', 'create', '-q', '-f', 'qcow2', '-b', self.secret,
            '-F', 'raw', img, str(MiB))
        self.assert_refused(self.add(img, 'qcow2'), 'found the image unsafe')

    def test_qcow2_external_data_file(self):
        img, data = self.path('datafile.qcow2'), self.path('data.raw')
        run('qemu-img', 'create', '-q', '-f', 'qcow2', '-o',
            'data_file=%s,data_file_raw=on' % data, img, str(MiB))
        with open(self.secret, 'rb') as src, open(data, 'wb') as dst:
            dst.write(src.read())
        self.assert_refused(self.add(img, 'qcow2'), 'found the image unsafe')

    def test_vmdk_extent_naming_a_host_file(self):
        img = self.path('flat.vmdk')
        with open(img, 'w') as f:
            f.write('# Disk DescriptorFile\nversion=1\nCID=fffffffe\n'
                    'parentCID=ffffffff\ncreateType="monolithicFlat"\n\n'
                    '# Extent description\nRW %d FLAT "%s" 0\n\n'
                    '# The Disk Data Base\n#DDB\n'
                    'ddb.virtualHWVersion = "4"\n'
                    'ddb.adapterType = "ide"\n' % (MiB // 512, self.secret))
        self.assert_refused(self.add(img, 'vmdk', declare_virtual_size=False),
                            "claimed to be 'vmdk'")

    def test_image_larger_than_the_volume(self):
        img = test_api_flows.make_image(self.work, 'big', 0xc3, 2 * GiB)
        self.assert_refused(self.add(img, 'qcow2', declare_virtual_size=False),
                            'fit')

    def test_qcow2_declared_raw(self):
        img = test_api_flows.make_image(self.work, 'q', 0xd4, 4 * MiB)
        self.assert_refused(self.add(img, 'raw', declare_virtual_size=False),
                            'declared raw but its data is qcow2')

    # -- accepted ------------------------------------------------------------

    def test_vmdk_of_an_allowed_create_type_is_written(self):
        img = test_api_flows.make_image(self.work, 'ok', 0xa1, 8 * MiB,
                                        fmt='vmdk')
        image_id = self.add(img, 'vmdk')
        vol_id = self.old_volume()
        self.assertEqual('available', self.reimage(vol_id, image_id))
        self.assert_head(vol_id, b'\xa1' * MiB + b'\0' * MiB)

    def test_file_location_read_when_the_operator_allows_it(self):
        # upstream's gate, decided by the image service's download()
        self.flags(allowed_direct_url_schemes=['file'])
        image_id = self.add(test_api_flows.make_image(
            self.work, 'served', 0xb7, 4 * MiB, fmt='raw'), 'raw')
        stored = test_api_flows.make_image(self.work, 'stored', 0xe5,
                                           4 * MiB, fmt='raw')
        self.images.locations[image_id] = 'file://' + stored
        vol_id = self.old_volume()
        self.assertEqual('available', self.reimage(vol_id, image_id))
        self.assert_head(vol_id, b'\xe5' * MiB)
