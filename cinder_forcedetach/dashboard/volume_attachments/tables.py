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


"""The panel's table, and the Force Detach action of every volume table."""

from django.template import defaultfilters
from django.utils.html import format_html_join
from django.utils.translation import gettext_lazy as _
from horizon import tables

URL = 'horizon:admin:volume_attachments:force_detach'


class ForceDetachLink(tables.LinkAction):
    """Our force-detach, offered wherever a volume may be stuck or held."""

    name = 'force_detach'
    verbose_name = _("Force Detach")
    url = URL
    classes = ('ajax-modal', 'btn-danger')
    icon = 'unlink'
    policy_rules = (('volume',
                     'volume_extension:volume_admin_actions:force_detach'),)

    def allowed(self, request, volume=None):
        if volume is None:
            return True
        return volume.status != 'available' or bool(
            getattr(volume, 'attachments', None))


def _attachments(row):
    return format_html_join(
        '\n', '<div class="attachment">{}</div>',
        ((a['label'],) for a in row.attachments)) or '-'


def _findings(row):
    lines = [('%s: %s%s' % (f.case, f.evidence, ' (the audit would not '
                            'repair it: %s)' % f.refused
                            if f.refused else ''),)
             for f in row.findings]
    if row.in_flux:
        lines.append((_('changed within the grace period: not judged '
                        'yet'),))
    return format_html_join('\n', '<div class="finding">{}</div>',
                            lines) or '-'


class VolumeAttachmentsTable(tables.DataTable):
    name = tables.WrappingColumn(
        'name', verbose_name=_("Name"), link='horizon:admin:volumes:detail')
    project = tables.Column('project', verbose_name=_("Project"))
    host = tables.WrappingColumn('backend', verbose_name=_("Host"))
    status = tables.Column('status', verbose_name=_("Status"),
                           filters=(defaultfilters.title,))
    attached = tables.Column(_attachments, verbose_name=_("Attachments"))
    findings = tables.Column(_findings, verbose_name=_("Audit findings"))

    def get_object_display(self, datum):
        return datum.name or datum.id

    class Meta(object):
        name = 'volume_attachments'
        verbose_name = _("Volume Attachments")
        row_actions = (ForceDetachLink,)
