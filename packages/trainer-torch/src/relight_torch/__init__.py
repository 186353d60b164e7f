"""relight-torch."""
