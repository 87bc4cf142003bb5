"""Privileged helpers, run by Cinder's ``cinder.privsep.sys_admin_pctxt``.

The same privsep context Cinder's own tgt helper uses, so a deployment's
existing privsep configuration (``[cinder_sys_admin]``) covers it.
"""
