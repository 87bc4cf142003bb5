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


from unittest import mock

import testtools

from cinder_forcedetach.cmd import api_client


class HeadersTestCase(testtools.TestCase):

    def test_the_microversion_names_its_service(self):
        session = mock.Mock()
        self.assertEqual('volume 3.27', api_client.Client(
            session, 'http://c/v3')._headers()['OpenStack-API-Version'])
        # The Horizon plugin reads Nova's server listing with the same
        # client (cinder_forcedetach.dashboard.api.servers).
        self.assertEqual('compute 2.89', api_client.Client(
            session, 'http://n/v2.1', api_version='2.89',
            service_type='compute')._headers()['OpenStack-API-Version'])
