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


"""Cinder and Nova as the operator logged in to Horizon.

One :class:`~cinder_forcedetach.cmd.api_client.Client` per request, on the
operator's token and the catalog's endpoint: the force-detach the panel
runs is the one the ``openstack`` and ``cinder-forcedetach`` commands run
(:func:`cinder_forcedetach.cmd.api_commands.force_detach`).
"""

from django.conf import settings
from horizon import exceptions as horizon_exceptions
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from openstack_dashboard.api import base

from cinder_forcedetach.audit import from_api
from cinder_forcedetach.cmd import api_client

#: Catalog types of Cinder's v3 API, in Horizon's order.
VOLUME_TYPES = ('block-storage', 'block-store', 'volumev3', 'volume')


def _session(request, endpoint):
    verify = (getattr(settings, 'OPENSTACK_SSL_CACERT', None) or
              not getattr(settings, 'OPENSTACK_SSL_NO_VERIFY', False))
    return ks_session.Session(
        auth=token_endpoint.Token(endpoint, request.user.token.id),
        verify=verify)


def _endpoint(request, kinds):
    for kind in kinds:
        try:
            return base.url_for(request, kind)
        except horizon_exceptions.ServiceCatalogException:
            pass
    return None


def cinder(request, service_token=False):
    """Our API client on Cinder's endpoint, as the logged-in operator.

    *service_token*: send the token as a service token too, as Nova does
    (Cinder requires one to end an attachment an instance may still use:
    bug #2004555); Keystone accepts it only from a user with a service
    role.
    """
    endpoint = _endpoint(request, VOLUME_TYPES)
    if endpoint is None:
        raise horizon_exceptions.ServiceCatalogException('volumev3')
    return api_client.Client(_session(request, endpoint), endpoint,
                             service_token=service_token)


def servers(request):
    """Nova's servers of every project, or None where Nova is absent."""
    endpoint = _endpoint(request, ('compute',))
    if endpoint is None:
        return None
    return from_api.servers(api_client.Client(
        _session(request, endpoint), endpoint,
        api_version=from_api.NOVA_API_VERSION, service_type='compute'))
