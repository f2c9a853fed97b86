"""The Sluice page's app (plugins/sluice_page.py builds it on the api-server's first request)."""
