//! The keys and values of past positions ([`KvCache`]): owned by whoever runs a
//! generation and passed to every `Decoder::forward`.

use protocol::KvCacheKind;
use tch::{Kind, Tensor};

/// The keys and values of past positions, one pair per layer, owned by whoever runs the
/// generation.
#[derive(Debug)]
pub enum KvCache {
    /// No cache (`use_cache=False`, and a forward run): each pass sees only its own tokens.
    Off,
    /// Grows by concatenation each step (transformers' DynamicCache).
    Dynamic {
        layers: Vec<Option<(Tensor, Tensor)>>,
        /// The dtype keys and values are stored in when not the keys' own.
        store: Option<Kind>,
    },
    /// Allocated once for `capacity` positions at the first update and written in place
    /// (StaticCache, gpt-fast); `filled` positions hold values. `masked`: every pass
    /// attends to the whole capacity under a mask (positions past the current length
    /// hidden) and writes with `index_copy_` at device-tensor positions, so a pass's shapes
    /// and addresses never change: what CUDA graph replay of the decode step needs.
    Static {
        capacity: i64,
        filled: i64,
        masked: bool,
        layers: Vec<Option<(Tensor, Tensor)>>,
        store: Option<Kind>,
    },
}

impl KvCache {
    /// An empty cache of `kind` for a decoder of `layers` layers; a static one will hold
    /// `capacity` positions.
    pub fn new(kind: KvCacheKind, layers: usize, capacity: i64) -> KvCache {
        match kind {
            KvCacheKind::Off => KvCache::Off,
            KvCacheKind::Dynamic => KvCache::Dynamic {
                layers: (0..layers).map(|_| None).collect(),
                store: None,
            },
            KvCacheKind::Static => KvCache::Static {
                capacity,
                filled: 0,
                masked: false,
                layers: (0..layers).map(|_| None).collect(),
                store: None,
            },
        }
    }

    /// The same cache storing its keys and values in `store` (`None`: the keys' dtype).
    /// They are cast on the way in and back to the keys' dtype for attention, which needs
    /// one dtype for query, keys and values: the cache's bytes halve, and every step pays
    /// a cast of what it attends to.
    pub fn storing(mut self, kind: Option<Kind>) -> KvCache {
        match &mut self {
            KvCache::Off => {}
            KvCache::Dynamic { store, .. } | KvCache::Static { store, .. } => *store = kind,
        }
        self
    }

    /// A static cache of `capacity` positions attended to whole, under a mask (see
    /// [`KvCache::Static`]).
    pub fn static_masked(layers: usize, capacity: i64) -> KvCache {
        KvCache::Static {
            capacity,
            filled: 0,
            masked: true,
            layers: (0..layers).map(|_| None).collect(),
            store: None,
        }
    }

    /// Whether passes attend to the whole capacity under a mask.
    pub fn is_masked(&self) -> bool {
        matches!(self, KvCache::Static { masked: true, .. })
    }

    /// A masked cache's visibility of its positions to the new tokens at `positions`
    /// (`[tokens]` int64): `[tokens, capacity]`, true where capacity position j <= the
    /// token's. `None` for the other caches.
    pub(super) fn capacity_mask(&self, positions: &Tensor) -> Option<Tensor> {
        let KvCache::Static { capacity, masked: true, .. } = self else {
            return None;
        };
        let all = Tensor::arange(*capacity, (Kind::Int64, positions.device()));
        Some(all.unsqueeze(0).le_tensor(&positions.unsqueeze(1)))
    }

    /// Stores layer `layer`'s new keys and values (`[batch, kv_heads, tokens, head_dim]`,
    /// the first at `position`, all at `positions`) and returns every position's keys and
    /// values to attend to. The values are kept in the keys' dtype, as transformers' caches
    /// keep them (DynamicLayer concatenates onto an empty tensor of the keys' dtype,
    /// StaticLayer allocates both in it): under autocast with fp32 weights the keys are
    /// fp32 (RoPE multiplies by fp32 cos and sin) while the value projection ran in bf16.
    pub(super) fn update(
        &mut self,
        layer: usize,
        k: Tensor,
        v: Tensor,
        position: i64,
        positions: &Tensor,
    ) -> (Tensor, Tensor) {
        if matches!(self, KvCache::Off) {
            return (k, v);
        }
        let v = if v.kind() == k.kind() { v } else { v.to_kind(k.kind()) };
        let compute = k.kind();
        let back = |t: Tensor| if t.kind() == compute { t } else { t.to_kind(compute) };
        let (k, v) = match self {
            KvCache::Dynamic { store: Some(s), .. } | KvCache::Static { store: Some(s), .. }
                if *s != compute =>
            {
                (k.to_kind(*s), v.to_kind(*s))
            }
            _ => (k, v),
        };
        match self {
            KvCache::Off => (k, v),
            KvCache::Dynamic { layers, .. } => {
                let (k, v) = match layers[layer].take() {
                    None => (k, v),
                    // The old tensors are freed as soon as the new ones exist, as
                    // DynamicCache's `torch.cat` rebinding frees them.
                    Some((pk, pv)) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
                };
                layers[layer] = Some((k.shallow_clone(), v.shallow_clone()));
                (back(k), back(v))
            }
            KvCache::Static {
                capacity,
                filled,
                masked,
                layers,
                ..
            } => {
                let t = k.size()[2];
                let (ck, cv) = layers[layer].get_or_insert_with(|| {
                    let mut shape = k.size();
                    shape[2] = *capacity;
                    (
                        Tensor::zeros(&shape, (k.kind(), k.device())),
                        Tensor::zeros(&shape, (v.kind(), v.device())),
                    )
                });
                if *masked {
                    // In place at device positions: no host number reaches the kernels.
                    let _ = ck.index_copy_(2, positions, &k);
                    let _ = cv.index_copy_(2, positions, &v);
                    return (back(ck.shallow_clone()), back(cv.shallow_clone()));
                }
                ck.narrow(2, position, t).copy_(&k);
                cv.narrow(2, position, t).copy_(&v);
                if layer == 0 {
                    *filled = position + t;
                }
                (back(ck.narrow(2, 0, position + t)), back(cv.narrow(2, 0, position + t)))
            }
        }
    }

    /// Bytes of the cache's tensors, measured from them.
    pub fn bytes(&self) -> u64 {
        self.tensors()
            .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
            .sum()
    }

    /// Positions its tensors hold per sequence (a static cache: its whole length).
    pub fn positions(&self) -> i64 {
        self.tensors().next().map_or(0, |t| t.size()[2])
    }

    /// Bytes per element of its keys and of its values (0 when empty).
    pub fn element_bytes(&self) -> (u64, u64) {
        let mut t = self.tensors();
        let mut elt = || t.next().map_or(0, |t| t.kind().elt_size_in_bytes() as u64);
        (elt(), elt())
    }

    /// The tensors it holds (each layer's keys, then its values).
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        let layers: &[Option<(Tensor, Tensor)>] = match self {
            KvCache::Off => &[],
            KvCache::Dynamic { layers: l, .. } | KvCache::Static { layers: l, .. } => l,
        };
        layers.iter().flatten().flat_map(|(k, v)| [k, v])
    }
}
