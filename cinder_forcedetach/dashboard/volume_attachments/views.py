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


"""The panel's list, and the Force Detach confirmation."""

from django.conf import settings
from django.urls import reverse
from django.urls import reverse_lazy
from django.utils.translation import gettext_lazy as _
from horizon import exceptions
from horizon import forms
from horizon import messages
from horizon import tables
from horizon.utils import memoized

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import from_api
from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.dashboard import api as fd_api
from cinder_forcedetach.dashboard.volume_attachments import (
    forms as fd_forms)
from cinder_forcedetach.dashboard.volume_attachments import (
    tables as fd_tables)

INDEX = reverse_lazy('horizon:admin:volume_attachments:index')


def _label(attachment_id, status, host, instance):
    """``host H, instance I: STATUS (attachment ID)``."""
    where = ', '.join(part for part in (
        _('host %s') % host if host else None,
        _('instance %s') % instance if instance else None) if part)
    return _('%(where)s: %(status)s (attachment %(id)s)') % {
        'where': where or _('no host yet'), 'status': status,
        'id': attachment_id}


class Row(object):
    """One volume of the list, its live attachments and findings."""

    def __init__(self, volume, live, volume_findings, in_flux):
        self.id = volume['id']
        self.name = volume.get('name') or volume['id']
        self.project = volume.get('os-vol-tenant-attr:tenant_id')
        self.backend = volume.get('os-vol-host-attr:host')
        self.status = volume['status']
        self.attachments = [
            {'id': a.id, 'label': _label(a.id, a.attach_status,
                                         a.attached_host, a.instance_uuid)}
            for a in live]
        self.findings = volume_findings
        self.in_flux = in_flux


def rows(request):
    """The listed volumes, as :class:`Row`, from Cinder's and Nova's APIs."""
    client = fd_api.cinder(request)
    volumes = from_api.volumes(client)
    attachments = from_api.attachments(client)
    try:
        servers = fd_api.servers(request)
    except CliError as err:
        messages.warning(request, _('Nova could not be read (%s): what an '
                                    'instance may hold is not judged.') %
                         err.message)
        servers = None
    snap = from_api.snapshot(volumes, attachments, servers)
    # Horizon's setting FORCEDETACH_AUDIT_GRACE: seconds a volume must be
    # left alone before its state counts (the audit's --grace).
    found, in_flux = from_api.by_volume(snap, getattr(
        settings, 'FORCEDETACH_AUDIT_GRACE', cases.DEFAULT_GRACE))
    result = []
    for volume in volumes:
        live = snap.attachments.get(volume['id'], [])
        row_findings = found.get(volume['id'], [])
        if from_api.listed(snap.volumes[volume['id']], live, row_findings):
            result.append(Row(volume, live, row_findings,
                              volume['id'] in in_flux))
    return result


class IndexView(tables.DataTableView):
    table_class = fd_tables.VolumeAttachmentsTable
    template_name = 'volume_attachments/index.html'
    page_title = _("Volume Attachments")

    def get_data(self):
        try:
            return rows(self.request)
        except CliError as err:
            messages.error(self.request, _('Unable to read volumes and '
                                           'attachments: %s') % err.message)
            return []


class ForceDetachView(forms.ModalFormView):
    form_class = fd_forms.ForceDetach
    template_name = 'volume_attachments/force_detach.html'
    modal_id = 'force_detach_modal'
    submit_label = _("Force Detach")
    submit_url = 'horizon:admin:volume_attachments:force_detach'
    success_url = INDEX
    page_title = _("Force Detach Volume")

    @memoized.memoized_method
    def get_data(self):
        """The volume, and its live attachments with their exports."""
        client = fd_api.cinder(self.request)
        volume_id = self.kwargs['volume_id']
        try:
            volume = client.get_volume(volume_id)
            hosts = {a.get('attachment_id') or a.get('id'): a.get(
                'host_name') for a in volume.get('attachments') or []}
            live = []
            for summary in from_api.attachments(client, volume['id']):
                if summary.get('status') in from_api.ENDED:
                    continue
                attachment = client.get_attachment(summary['id'])
                live.append({
                    'id': summary['id'],
                    'label': _label(summary['id'], summary.get('status'),
                                    hosts.get(summary['id']),
                                    summary.get('instance')),
                    'export': from_api.export_of(
                        attachment.get('connection_info'))})
        except CliError as err:
            exceptions.handle(self.request, _('Unable to read volume %(vol)s:'
                                              ' %(err)s') % {
                'vol': volume_id, 'err': err.message}, redirect=INDEX)
        return volume, live

    def get_context_data(self, **kwargs):
        context = super(ForceDetachView, self).get_context_data(**kwargs)
        volume, live = self.get_data()
        context['volume'] = volume
        context['attachments'] = live
        context['submit_url'] = reverse(self.submit_url,
                                        args=(volume['id'],))
        return context

    def get_initial(self):
        volume, live = self.get_data()
        choices = [(fd_forms.EVERY_HOST, _('Every host (%d attachment(s))')
                    % len(live))]
        choices += [(a['id'], a['label']) for a in live]
        return {'volume_id': volume['id'], 'choices': choices}
