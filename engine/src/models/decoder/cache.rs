//! The keys and values of past positions ([`KvCache`]): owned by whoever runs a
//! generation and passed to every `Decoder::forward`.
//!
//! A sliding layer (a window of `w` positions) holds at most what its next token can see:
//!
//! - dynamic: trimmed after each update to the last `w − 1` positions (the next token's own
//!   key and value join at attention time, making `w`), as transformers'
//!   `DynamicSlidingWindowLayer` keeps them; the trimmed keys and values are copied into
//!   tensors of their own, so the bytes held are the bytes counted;
//! - static: `min(capacity, w)` positions allocated once; when full, each new position
//!   shifts the others down one and takes the last slot (transformers'
//!   `StaticSlidingWindowLayer` rolls the same way), so the keys stay in position order;
//! - masked static (CUDA graph replay): every layer keeps the whole capacity, and the
//!   window is cut into the mask instead (a graph replays fixed shapes).

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
        /// An fp8 store's per-tensor scales, per layer (see [`KvCache::storing`]).
        scales: Vec<Option<(Tensor, Tensor)>>,
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
        scales: Vec<Option<(Tensor, Tensor)>>,
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
                scales: (0..layers).map(|_| None).collect(),
            },
            KvCacheKind::Static => KvCache::Static {
                capacity,
                filled: 0,
                masked: false,
                layers: (0..layers).map(|_| None).collect(),
                store: None,
                scales: (0..layers).map(|_| None).collect(),
            },
        }
    }

    /// The same cache storing its keys and values in `store` (`None`: the keys' dtype).
    /// They are cast on the way in and back to the keys' dtype for attention, which needs
    /// one dtype for query, keys and values: the cache's bytes halve, and every step pays
    /// a cast of what it attends to.
    ///
    /// `Float8e4m3fn` stores one byte per element with a per-tensor scale for each layer's
    /// keys and for its values (fp32, on the device, beside the cache and not counted in
    /// [`KvCache::bytes`]): set from the layer's first write (the prefill) as its largest
    /// |value| / 448, e4m3's largest finite value, as vLLM's dynamic KV scales do; later
    /// positions beyond it saturate at ±448 × scale. The fp8 bits are kept as uint8 (the
    /// same bytes), so concatenation and in-place writes need no fp8 kernels.
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
            scales: (0..layers).map(|_| None).collect(),
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
    ///
    /// A sliding layer (`window`) returns the positions this pass's tokens may see and
    /// keeps at most what the next may (see the module's notes); the keys returned are
    /// always the last ones, ending at the last new token.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn update(
        &mut self,
        layer: usize,
        k: Tensor,
        v: Tensor,
        position: i64,
        positions: &Tensor,
        window: Option<i64>,
    ) -> (Tensor, Tensor) {
        if matches!(self, KvCache::Off) {
            return (k, v);
        }
        let v = if v.kind() == k.kind() { v } else { v.to_kind(k.kind()) };
        let compute = k.kind();
        let fp8_scales = match self {
            KvCache::Dynamic { store: Some(Kind::Float8e4m3fn), scales, .. }
            | KvCache::Static { store: Some(Kind::Float8e4m3fn), scales, .. } => {
                let (sk, sv) = scales[layer].get_or_insert_with(|| (fp8_scale(&k), fp8_scale(&v)));
                Some((sk.shallow_clone(), sv.shallow_clone()))
            }
            _ => None,
        };
        // Keys (0) and values (1) back in the dtype attention computes in.
        let back = |t: Tensor, which: usize| match &fp8_scales {
            Some((sk, sv)) => from_fp8(&t, if which == 0 { sk } else { sv }, compute),
            None if t.kind() == compute => t,
            None => t.to_kind(compute),
        };
        let (k, v) = match (&*self, &fp8_scales) {
            (_, Some((sk, sv))) => (to_fp8(&k, sk), to_fp8(&v, sv)),
            (KvCache::Dynamic { store: Some(s), .. } | KvCache::Static { store: Some(s), .. }, None)
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
                    // A copy, as DynamicCache's first `torch.cat` onto an empty tensor makes
                    // one: k and v may be views of a pass's larger tensors (the queries and
                    // keys roped together, q/k/v projected together), which the cache must
                    // not keep alive.
                    None => (k.copy(), v.copy()),
                    // The old tensors are freed as soon as the new ones exist, as
                    // DynamicCache's `torch.cat` rebinding frees them.
                    Some((pk, pv)) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
                };
                let kept = match window {
                    // Only the last window − 1: copies, so the full tensors are freed.
                    Some(w) if k.size()[2] > w - 1 => {
                        let t = k.size()[2];
                        let keep = (w - 1).max(0);
                        (k.narrow(2, t - keep, keep).copy(), v.narrow(2, t - keep, keep).copy())
                    }
                    _ => (k.shallow_clone(), v.shallow_clone()),
                };
                layers[layer] = Some(kept);
                (back(k, 0), back(v, 1))
            }
            KvCache::Static {
                capacity,
                filled,
                masked,
                layers,
                ..
            } => {
                let t = k.size()[2];
                // A sliding layer's own length (a masked cache keeps the whole capacity and
                // cuts the window into its mask).
                let length = match (window, *masked) {
                    (Some(w), false) => w.min(*capacity),
                    _ => *capacity,
                };
                let (ck, cv) = layers[layer].get_or_insert_with(|| {
                    let mut shape = k.size();
                    shape[2] = length;
                    (
                        Tensor::zeros(&shape, (k.kind(), k.device())),
                        Tensor::zeros(&shape, (v.kind(), v.device())),
                    )
                });
                if *masked {
                    // In place at device positions: no host number reaches the kernels.
                    let _ = ck.index_copy_(2, positions, &k);
                    let _ = cv.index_copy_(2, positions, &v);
                    return (back(ck.shallow_clone(), 0), back(cv.shallow_clone(), 1));
                }
                if length < *capacity {
                    if layer == 0 {
                        *filled = position + t;
                    }
                    // The positions held before this pass: the last `length` at most.
                    let held = position.min(length);
                    if held + t <= length {
                        ck.narrow(2, held, t).copy_(&k);
                        cv.narrow(2, held, t).copy_(&v);
                        return (back(ck.narrow(2, 0, held + t), 0), back(cv.narrow(2, 0, held + t), 1));
                    }
                    if t == 1 {
                        // Full: every position shifts down one, the new one takes the last slot.
                        for (c, new) in [(&mut *ck, &k), (&mut *cv, &v)] {
                            let rest = c.narrow(2, 1, length - 1).copy();
                            c.narrow(2, 0, length - 1).copy_(&rest);
                            c.narrow(2, length - 1, 1).copy_(new);
                        }
                        return (back(ck.shallow_clone(), 0), back(cv.shallow_clone(), 1));
                    }
                    // Several new positions past the window: attend to all of them, keep the last.
                    let fk = Tensor::cat(&[&ck.narrow(2, 0, held), &k], 2);
                    let fv = Tensor::cat(&[&cv.narrow(2, 0, held), &v], 2);
                    let all = held + t;
                    ck.copy_(&fk.narrow(2, all - length, length));
                    cv.copy_(&fv.narrow(2, all - length, length));
                    return (back(fk, 0), back(fv, 1));
                }
                ck.narrow(2, position, t).copy_(&k);
                cv.narrow(2, position, t).copy_(&v);
                if layer == 0 {
                    *filled = position + t;
                }
                (back(ck.narrow(2, 0, position + t), 0), back(cv.narrow(2, 0, position + t), 1))
            }
        }
    }

    /// Bytes of the cache's tensors, measured from them.
    pub fn bytes(&self) -> u64 {
        self.tensors()
            .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
            .sum()
    }

    /// Positions its tensors hold per sequence (a static cache: its whole length): the
    /// most any layer holds (a full layer's, where sliding ones hold fewer).
    pub fn positions(&self) -> i64 {
        self.tensors().map(|t| t.size()[2]).max().unwrap_or(0)
    }

    /// Per layer: the bytes of its keys and values and the positions they hold (0 for a
    /// layer not yet written).
    pub fn per_layer(&self) -> Vec<(u64, i64)> {
        let layers: &[Option<(Tensor, Tensor)>] = match self {
            KvCache::Off => &[],
            KvCache::Dynamic { layers: l, .. } | KvCache::Static { layers: l, .. } => l,
        };
        let bytes = |t: &Tensor| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64;
        layers
            .iter()
            .map(|l| l.as_ref().map_or((0, 0), |(k, v)| (bytes(k) + bytes(v), k.size()[2])))
            .collect()
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

/// e4m3's largest finite value.
const E4M3_MAX: f64 = 448.0;

/// A per-tensor fp8 scale for `t`: its largest |value| / 448 (fp32, 0-d, on its device;
/// never 0, so an all-zero first write still divides).
fn fp8_scale(t: &Tensor) -> Tensor {
    (t.abs().max().to_kind(Kind::Float) / E4M3_MAX).clamp_min(1e-12)
}

/// `t / scale` in e4m3 (saturated at ±448: a plain cast would turn larger values into
/// NaN), its bits as uint8.
fn to_fp8(t: &Tensor, scale: &Tensor) -> Tensor {
    (t.to_kind(Kind::Float) / scale)
        .clamp(-E4M3_MAX, E4M3_MAX)
        .to_kind(Kind::Float8e4m3fn)
        .view_dtype(Kind::Uint8)
}

/// The inverse of [`to_fp8`], in `kind`.
fn from_fp8(t: &Tensor, scale: &Tensor, kind: Kind) -> Tensor {
    (t.view_dtype(Kind::Float8e4m3fn).to_kind(Kind::Float) * scale).to_kind(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys whose values are their positions, `[1, 1, n, 1]` from `from`.
    fn at(from: i64, n: i64) -> Tensor {
        Tensor::arange_start(from, from + n, (Kind::Float, tch::Device::Cpu)).view([1, 1, n, 1])
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.reshape([-1])).unwrap()
    }

    #[test]
    fn a_sliding_layer_keeps_window_minus_one_growing_and_the_window_static_in_order() {
        let w = 4;
        for kind in [KvCacheKind::Dynamic, KvCacheKind::Static] {
            let mut cache = KvCache::new(kind, 1, 10);
            // A prefill of 6 positions past the window: all 6 attended, the last kept.
            let pos = Tensor::arange(6, (Kind::Int64, tch::Device::Cpu));
            let (k, _) = cache.update(0, at(0, 6), at(0, 6), 0, &pos, Some(w));
            assert_eq!(values(&k), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
            let kept = match kind {
                KvCacheKind::Dynamic => vec![3.0, 4.0, 5.0],
                _ => vec![2.0, 3.0, 4.0, 5.0],
            };
            assert_eq!(values(cache.tensors().next().unwrap()), kept, "{kind:?}");
            // Each decode step attends to the window (its own position last) and keeps what
            // the next needs.
            for p in 6..9 {
                let one = Tensor::from_slice(&[p]);
                let (k, _) = cache.update(0, at(p, 1), at(p, 1), p, &one, Some(w));
                let want: Vec<f32> = (p - w + 1..=p).map(|x| x as f32).collect();
                assert_eq!(values(&k), want, "{kind:?} at {p}");
            }
            let held = cache.positions();
            assert_eq!(held, if kind == KvCacheKind::Dynamic { w - 1 } else { w });
            assert_eq!(cache.bytes(), 2 * held as u64 * 4);
        }
    }

    #[test]
    fn an_fp8_cache_holds_one_byte_per_element_and_gives_back_what_it_was_given() {
        tch::manual_seed(7);
        let mut cache = KvCache::new(KvCacheKind::Dynamic, 1, 0).storing(Some(Kind::Float8e4m3fn));
        let k = Tensor::randn([1, 2, 5, 8], (Kind::Float, tch::Device::Cpu)) * 30.0;
        let v = Tensor::randn([1, 2, 5, 8], (Kind::Float, tch::Device::Cpu));
        let positions = Tensor::arange(5, (Kind::Int64, tch::Device::Cpu));
        let (bk, bv) = cache.update(0, k.shallow_clone(), v.shallow_clone(), 0, &positions, None);
        assert_eq!(cache.bytes(), 2 * 2 * 5 * 8, "one byte per element");
        assert_eq!((bk.kind(), bv.kind()), (Kind::Float, Kind::Float));
        // e4m3 keeps 3 mantissa bits: within 1/16 of each value, relative, after scaling.
        let rel = |a: &Tensor, b: &Tensor| ((a - b).abs().max().double_value(&[])) / b.abs().max().double_value(&[]);
        assert!(rel(&bk, &k) < 0.07 && rel(&bv, &v) < 0.07, "{} {}", rel(&bk, &k), rel(&bv, &v));
        assert!(rel(&bk, &k) > 0.0, "fp8 rounds");
        // A later position far beyond the prefill's range saturates instead of becoming NaN.
        let big = Tensor::ones([1, 2, 1, 8], (Kind::Float, tch::Device::Cpu)) * 1e6;
        let next = Tensor::from_slice(&[5i64]);
        let (bk, _) = cache.update(0, big.shallow_clone(), big, 5, &next, None);
        assert_eq!(bk.size()[2], 6);
        assert!(bk.isfinite().all().int64_value(&[]) == 1, "saturated, not NaN");
        assert_eq!(cache.bytes(), 2 * 2 * 6 * 8);
    }
}
