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

"""The OpenStackClient plugin module (entry point ``openstack.cli.extension``).

OpenStackClient imports it for every command line, so it imports nothing
OpenStackClient lacks: osc-lib only inside :func:`make_client`.
:func:`make_client` builds a :class:`~cinder_forcedetach.cmd.api_client.
Client` from OpenStackClient's keystoneauth session and the block-storage
endpoint of the catalog (or ``block_storage_endpoint_override``).

Global options this plugin adds:

``--os-forcedetach-service-token`` (``OS_FORCEDETACH_SERVICE_TOKEN``, or
``forcedetach_service_token: true`` in clouds.yaml): every request also
carries the user's token as ``X-Service-Token``, as Nova's do, which Cinder
requires (bug #2004555) to force-detach an attachment Nova may still use;
the user needs one of Cinder's ``service_token_roles``.  The token is a
header only: never logged or printed.  ``volume force detach
--service-token`` does the same for one command.
"""

import re

from oslo_utils import strutils

from cinder_forcedetach.cmd import api_client

API_NAME = 'forcedetach'
API_VERSION_OPTION = 'os_forcedetach_api_version'
DEFAULT_API_VERSION = '1'
API_VERSIONS = {'1': 'cinder_forcedetach.cmd.api_client.Client'}

#: Catalog service types of Cinder's v3 API, in the order tried.
SERVICE_TYPES = ('block-storage', 'volumev3')
#: The oldest Cinder API microversion the commands work with (attachments).
MIN_VOLUME_API_VERSION = api_client.DEFAULT_API_VERSION
TIMEOUT = 60.0


def volume_api_version(requested):
    """The microversion to send for OpenStackClient's volume API version.

    ``--os-volume-api-version`` / ``OS_VOLUME_API_VERSION`` when it is a
    3.x microversion the commands work with, else
    :data:`MIN_VOLUME_API_VERSION` (OpenStackClient's default is ``3``).
    """
    found = re.match(r'^3\.(\d+)$', str(requested or '').strip())
    minimum = int(MIN_VOLUME_API_VERSION.split('.')[1])
    if found and int(found.group(1)) >= minimum:
        return '3.%d' % int(found.group(1))
    return MIN_VOLUME_API_VERSION


def block_storage_endpoint(instance):
    """Cinder's v3 endpoint: an override, or the catalog's; None if none."""
    from keystoneauth1 import exceptions as ks_exc

    for service_type in SERVICE_TYPES:
        try:
            endpoint = instance.get_endpoint_for_service_type(
                service_type, region_name=instance.region_name,
                interface=instance.interface)
        except ks_exc.EndpointNotFound:
            endpoint = None
        if endpoint:
            return endpoint
    return None


def make_client(instance):
    """The client of the commands (OpenStackClient plugin interface)."""
    from osc_lib import exceptions

    endpoint = block_storage_endpoint(instance)
    if not endpoint:
        raise exceptions.CommandError(
            'no block-storage (or volumev3) endpoint in the catalog for '
            'region %s, interface %s; set block_storage_endpoint_override '
            'in clouds.yaml to use another' % (instance.region_name,
                                               instance.interface))
    config = instance.get_configuration()
    versions = getattr(instance, '_api_version', None) or {}
    return api_client.Client(
        instance.session, endpoint,
        api_version=volume_api_version(versions.get('volume')),
        service_token=strutils.bool_from_string(
            config.get('forcedetach_service_token')),
        timeout=TIMEOUT)


def make_compute_client(instance):
    """A client on Nova's API for the audit, or None where there is none."""
    from keystoneauth1 import exceptions as ks_exc

    from cinder_forcedetach.audit import from_api

    try:
        endpoint = instance.get_endpoint_for_service_type(
            'compute', region_name=instance.region_name,
            interface=instance.interface)
    except ks_exc.EndpointNotFound:
        endpoint = None
    if not endpoint:
        return None
    return api_client.Client(instance.session, endpoint,
                             api_version=from_api.NOVA_API_VERSION,
                             service_type='compute', timeout=TIMEOUT)


def build_option_parser(parser):
    """The plugin's global options (OpenStackClient plugin interface)."""
    parser.add_argument(
        '--os-forcedetach-api-version', metavar='<forcedetach-api-version>',
        default=api_client.env('OS_FORCEDETACH_API_VERSION'),
        help='cinder-forcedetach plugin API version, default=%s '
             '(Env: OS_FORCEDETACH_API_VERSION)' % DEFAULT_API_VERSION)
    parser.add_argument(
        '--os-forcedetach-service-token', action='store_true',
        default=api_client.env('OS_FORCEDETACH_SERVICE_TOKEN'),
        help='cinder-forcedetach commands send the token as a service '
             'token too, as Nova does: Cinder requires it to force-detach '
             'an attachment Nova may still use (bug #2004555); the user '
             'needs a service role (Env: OS_FORCEDETACH_SERVICE_TOKEN)')
    return parser
