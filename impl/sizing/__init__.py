"""verikv.sizing: device-buffer sizing (accelerator catalog, kernel layouts, the planner).

``plan_kv_cache(model, device, ...)`` returns a ``KVCachePlan``; models come from
``get_preset``, ``geometry_from_hf_config``, ``load_model`` (a checkpoint folder) or
``ModelGeometry`` directly, devices from
``get_accelerator`` or ``describe_accelerator``. See docs/sizing.md.
"""

from verikv.sizing.catalog import ACCELERATORS, Accelerator, describe_accelerator, get_accelerator
from verikv.sizing.checkpoint import load_model
from verikv.sizing.geometry import AttentionLayer, MambaLayer, MLALayer, ModelGeometry, uniform_model
from verikv.sizing.hf_config import geometry_from_hf_config
from verikv.sizing.layers import PageArray
from verikv.sizing.planner import KVCachePlan, LayerBuffer, PlanGroup, plan_kv_cache
from verikv.sizing.presets import get_preset, preset_names

__all__ = [
    "ACCELERATORS",
    "Accelerator",
    "AttentionLayer",
    "KVCachePlan",
    "LayerBuffer",
    "MLALayer",
    "MambaLayer",
    "ModelGeometry",
    "PageArray",
    "PlanGroup",
    "describe_accelerator",
    "geometry_from_hf_config",
    "get_accelerator",
    "get_preset",
    "load_model",
    "plan_kv_cache",
    "preset_names",
    "uniform_model",
]
