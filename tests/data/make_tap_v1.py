"""Generated tests/data/tap_v1.pt with the code of commit c61f375 (the tap as DS4D mixin: keys tap_e, nu_tap,
tap_width_bits). Kept for the record; rerunning it now writes the new keys."""
import torch
from ddesys import nn
torch.manual_seed(0)
out = {}
configs = {
    "grid": dict(d_model=4, d_state=4, l_max=32, tap=True, seed=3),
    "grid_w3": dict(d_model=4, d_state=4, l_max=32, tap=True, tap_width=3.0, seed=5),
    "constant": dict(d_model=4, d_state=4, l_max=32, tap=True, delay_init="constant", tau0=5.0, seed=3),
    "bidir": dict(d_model=3, d_state=4, l_max=32, tap=True, bidirectional=True, seed=7),
    "lazy": dict(d_model=4, d_state=4, l_max=None, tap=True, seed=3),
    "notap": dict(d_model=4, d_state=4, l_max=32, seed=3),
    "notap_lazy": dict(d_model=4, d_state=4, seed=3),
}
g = torch.Generator().manual_seed(11)
x = torch.randn(2, 24, 4, generator=g, dtype=torch.float64)
x3 = x[..., :3].contiguous()
for name, kw in configs.items():
    layer = nn.DS4D(**kw).double()
    init = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    xi = x3 if kw["d_model"] == 3 else x
    y0 = layer(xi).detach()
    init_after = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    # a "trained" layer: perturb every float parameter
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    if layer.has_tap:
        layer.tap_width = 2.5
    sd = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    y = layer(xi).detach()
    yr = layer(xi, mode="recurrent").detach() if not kw.get("bidirectional") else None
    out[name] = {"kw": kw, "init": init, "init_after_forward": init_after, "y_init": y0,
                 "state_dict": sd, "y": y, "y_recurrent": yr,
                 "kernel": layer.kernel(24).detach()}
out["x"] = x
torch.save(out, "tests/data/tap_v1.pt", _use_new_zipfile_serialization=False)
print({k: sorted(v["state_dict"]) for k, v in out.items() if k != "x"}["grid"])
