//! How a decoder's weights are made and laid out: their initialisation, their bytes, a
//! weight laid out row- or column-major in place, and several stacked into one tensor whose
//! rows their variables view.

use tch::nn;
use tch::Tensor;

use super::super::WeightLayout;

pub(crate) fn tensor_bytes(t: &Tensor) -> u64 {
    t.numel() as u64 * t.kind().elt_size_in_bytes() as u64
}

/// Lays one weight out (see [`WeightLayout`]) in place: the variable keeps its name and
/// values, its data becomes a copy in `layout` unless it is in it already.
pub(crate) fn lay_out_weight(w: &Tensor, layout: WeightLayout) {
    if w.dim() != 2 || WeightLayout::of(w) == Some(layout) {
        return;
    }
    let laid = match layout {
        WeightLayout::RowMajor => w.contiguous(),
        WeightLayout::ColumnMajor => w.tr().contiguous().tr(),
    };
    w.shallow_clone().set_data(&laid);
}

/// Stacks `ws` (`[out_i, in]` each) into one `[Σ out_i, in]` tensor in `layout` and makes
/// each variable a view of its rows: one allocation of the same bytes instead of several,
/// the variables' names and values unchanged, so a matmul with the stack computes them all.
pub(crate) fn fuse(ws: &[Tensor], layout: WeightLayout) -> Tensor {
    let stacked = match layout {
        WeightLayout::RowMajor => Tensor::cat(ws, 0),
        WeightLayout::ColumnMajor => Tensor::cat(&ws.iter().map(Tensor::tr).collect::<Vec<_>>(), 1).tr(),
    };
    let mut row = 0;
    for w in ws {
        let rows = w.size()[0];
        w.shallow_clone().set_data(&stacked.narrow(0, row, rows));
        row += rows;
    }
    stacked
}

/// Whether `stacked` is in `layout` with `first`'s variable still a view of it.
pub(crate) fn fused_in(stacked: Option<&Tensor>, first: &Tensor, layout: WeightLayout) -> bool {
    stacked.is_some_and(|s| WeightLayout::of(s) == Some(layout) && s.data_ptr() == first.data_ptr())
}

/// How a matrix starts: transformers' initialisation, normal(0, initializer_range), or, for
/// a model whose weights are read next ([`super::super::build`]), allocated and left unwritten:
/// neither random numbers nor zeros are spent on memory the checkpoint overwrites
/// (`weights::WeightFiles::load_into` fills every variable or the build fails).
#[derive(Clone, Copy, Debug)]
pub enum MatrixInit {
    Normal(f64),
    Unwritten,
}

impl MatrixInit {
    /// The variable `name` of shape `dims` under `p`.
    pub(crate) fn var(self, p: &nn::Path, name: &str, dims: &[i64]) -> Tensor {
        match self {
            MatrixInit::Normal(stdev) => p.var(name, dims, nn::Init::Randn { mean: 0.0, stdev }),
            MatrixInit::Unwritten => p.add(name, Tensor::empty(dims, (p.kind(), p.device())), true),
        }
    }
}

