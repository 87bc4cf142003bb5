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


"""What every array backend shares: WWPN normalisation."""

import ddt
import testtools

from cinder_forcedetach.arrays import base as array_base


@ddt.ddt
class NormalizeWwpnTestCase(testtools.TestCase):

    @ddt.unpack
    @ddt.data(('50:01:43:80:12:34:56:78', '5001438012345678'),
              ('0X500143801234567A', '500143801234567a'),
              (' 5001438012345678 ', '5001438012345678'))
    def test_normalize_wwpn(self, raw, expected):
        self.assertEqual(expected, array_base.normalize_wwpn(raw))

    @ddt.data('', '50014380123456', '5001438012345678aa', 'g001438012345678',
              '0000000000000000', 5001438012345678, None)
    def test_normalize_wwpn_refuses(self, raw):
        self.assertRaises(ValueError, array_base.normalize_wwpn, raw)
