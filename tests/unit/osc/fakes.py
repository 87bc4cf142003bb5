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

"""The fake Cinder API (:mod:`tests.unit.cmd.fake_cinder`) and an
OpenStackClient application around a plugin client."""

import io

from keystoneauth1 import session as ks_session

from cinder_forcedetach.cmd import api_client
from tests.unit.cmd import fake_cinder
from tests.unit.cmd.fake_cinder import ATT  # noqa: F401 (for the tests)
from tests.unit.cmd.fake_cinder import PROJECT
from tests.unit.cmd.fake_cinder import VOL


class FakeClientManager(object):
    def __init__(self, client):
        self.forcedetach = client


class FakeApp(object):
    """What a cliff command uses of OpenStackClient's application."""

    def __init__(self, client):
        self.client_manager = FakeClientManager(client)
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()
        self.stdin = io.StringIO()
        self.options = None


class FakeCinderTestCase(fake_cinder.FakeCinderTestCase):
    """The fake Cinder API, with the plugin's client on it."""

    def answer_volume(self, status, attachment_ids):
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': status,
            'attachments': [{'attachment_id': a} for a in attachment_ids]}})

    def client(self, service_token=False):
        """The plugin's client, as make_client builds it, on noauth."""
        auth = api_client.NoAuthPlugin('admin', PROJECT, self.endpoint)
        return api_client.Client(ks_session.Session(auth=auth),
                                 self.endpoint, service_token=service_token)
