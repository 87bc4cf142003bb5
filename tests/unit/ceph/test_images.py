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

import ddt
import testtools

from cinder_forcedetach.ceph import images


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
        self.assertEqual(expected, images.parse_rbd_location(url))

    def test_qemu_spec_escapes_and_has_no_key(self):
        spec = images.qemu_rbd_spec('volumes', 'vol:1', user='cinder',
                                    conf='/etc/ceph/c.conf',
                                    keyring='/k/ring', snapshot='s@1')
        self.assertEqual('rbd:volumes/vol\\:1@s\\@1:id=cinder:'
                         'conf=/etc/ceph/c.conf:keyring=/k/ring', spec)
        self.assertNotIn(':key=', spec)
