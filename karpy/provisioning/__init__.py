"""Provisioning: turning pending pods into NodeClaims (templates, batching inputs, launch choice)."""
