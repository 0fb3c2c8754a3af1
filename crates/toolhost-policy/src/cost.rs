//! What a rule can cost, worked out once when it is compiled, as a
//! function of the size of the arguments it reads.
//!
//! An operator's rule is trusted code, but its input is the agent's, and an
//! agent can be talked into sending anything. `args.items.map(x, args.s +
//! x)` is a legal rule whose work is the number of items times the length
//! of `s`: over 61 KiB of arguments it took 30 s of CPU and 309 MiB. The
//! interpreter has no budget of its own, so the bound is found here, on the
//! rule's syntax tree: every node is given an upper bound on the size of
//! the value it makes, the work it does and the bytes it allocates, as a
//! polynomial in `n`, the size of the arguments in bytes (their JSON).
//! Inside a comprehension (`all`, `exists`, `exists_one`, `map`,
//! `filter`) a bound may also depend on `x`, the size of the element at
//! hand; summing over the elements, the `x` terms add up to at most the
//! size of the list, and everything else is multiplied by the number of
//! elements. Comprehensions do not nest (the rule compiler refuses it), so
//! the degree stays low; a rule whose bound would pass degree 4 is
//! refused when it is compiled.
//!
//! Each call then evaluates the three polynomials at its own `n`, before
//! the rule runs: a call whose arguments would let a rule go over the
//! budget ([`Budget`]) is refused, and the rule never starts. The bound is
//! deliberately loose (it assumes the worst shape of arguments of that
//! size); what it buys is that no argument of any shape makes a rule work
//! past the budget.
//!
//! What this module must not do: under-count. Every operation the rule
//! compiler admits has a cost here, at least what the interpreter does for
//! it (a string `+` copies both sides; `in` over a list compares with every
//! element; `map` appends to its result in place).

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, operators};

/// Highest degree in `n` a bound may have.
const DEGREE: usize = 4;

/// The size of a value the rule cannot grow: a number, a boolean, a type.
/// (Its text may be longer; what it costs to compare or hold is not.)
const SCALAR: f64 = 8.0;

/// The bytes a value of the interpreter's takes beside its content (an
/// element of a list, a map's slot, a boxed result).
const SLOT: f64 = 64.0;

/// Work is counted in units of about a nanosecond of the interpreter's
/// time on this project's machines (`toolhost-bench --policy` measures
/// what a unit costs): evaluating one node ...
const NODE: f64 = 150.0;
/// ... one step of a comprehension besides its body (a scope, the element
/// boxed) ...
const STEP: f64 = 400.0;
/// ... and reading one byte of the arguments' JSON into the interpreter's
/// values. Bytes a node copies, compares or scans count one unit each.
const READ: f64 = 100.0;

/// Bytes allocated reading one byte of the arguments' JSON (a one-byte
/// element of a list becomes a value and its slot), and per step of a
/// comprehension.
const READ_ALLOC: f64 = 96.0;
const STEP_ALLOC: f64 = 512.0;

/// A bound on `binding` and `tool`: their strings are the binding's and
/// the catalog's, each bounded well under this.
const FACTS: f64 = 8192.0;

/// `Σ c[k]·n^k + cx·x`, with `None` for "no finite bound".
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Poly {
    c: [f64; DEGREE + 1],
    x: f64,
    unbounded: bool,
}

impl Poly {
    const ZERO: Self = Self {
        c: [0.0; DEGREE + 1],
        x: 0.0,
        unbounded: false,
    };
    const UNBOUNDED: Self = Self {
        c: [0.0; DEGREE + 1],
        x: 0.0,
        unbounded: true,
    };

    fn constant(k: f64) -> Self {
        let mut p = Self::ZERO;
        p.c[0] = k;
        p
    }

    /// `k·n`.
    fn n(k: f64) -> Self {
        let mut p = Self::ZERO;
        p.c[1] = k;
        p
    }

    /// `x`: the size of the element a comprehension is at.
    fn x() -> Self {
        let mut p = Self::ZERO;
        p.x = 1.0;
        p
    }

    fn add(self, o: Self) -> Self {
        if self.unbounded || o.unbounded {
            return Self::UNBOUNDED;
        }
        let mut p = self;
        for (a, b) in p.c.iter_mut().zip(o.c) {
            *a += b;
        }
        p.x += o.x;
        p
    }

    fn scale(self, k: f64) -> Self {
        if self.unbounded {
            return self;
        }
        let mut p = self;
        for a in &mut p.c {
            *a *= k;
        }
        p.x *= k;
        p
    }

    /// The product of two bounds that do not depend on `x`; unbounded past
    /// [`DEGREE`].
    fn times(self, o: Self) -> Self {
        if self.unbounded || o.unbounded || self.x != 0.0 || o.x != 0.0 {
            return Self::UNBOUNDED;
        }
        let mut p = Self::ZERO;
        for (i, a) in self.c.iter().enumerate() {
            for (j, b) in o.c.iter().enumerate() {
                if *a == 0.0 || *b == 0.0 {
                    continue;
                }
                match p.c.get_mut(i + j) {
                    Some(slot) => *slot += a * b,
                    None => return Self::UNBOUNDED,
                }
            }
        }
        p
    }

    /// The same bound with `x` taken as 0.
    fn without_x(self) -> Self {
        Self { x: 0.0, ..self }
    }

    /// Its value at `n` (`x` must be gone by then; infinity when not).
    pub(crate) fn at(&self, n: f64) -> f64 {
        if self.unbounded || self.x != 0.0 {
            return f64::INFINITY;
        }
        self.c.iter().rev().fold(0.0, |acc, c| acc * n + c)
    }

    /// The highest power of `n` with a coefficient (for messages).
    pub(crate) fn degree(&self) -> Option<usize> {
        if self.unbounded {
            return None;
        }
        Some(self.c.iter().rposition(|c| *c != 0.0).unwrap_or(0))
    }
}

/// The three bounds of one expression.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cost {
    /// The size of the value it makes (bytes of a string, elements and
    /// bytes of a list: an upper bound on its JSON).
    size: Poly,
    /// The work it does, in units of about a nanosecond ([`NODE`]).
    pub(crate) work: Poly,
    /// The bytes it allocates, in all (an upper bound on its peak).
    pub(crate) alloc: Poly,
}

impl Cost {
    fn leaf(size: Poly) -> Self {
        Self {
            size,
            work: Poly::constant(NODE),
            alloc: Poly::ZERO,
        }
    }

    fn then(self, o: Self) -> Self {
        Self {
            size: o.size,
            work: self.work.add(o.work),
            alloc: self.alloc.add(o.alloc),
        }
    }
}

/// The budget each call's rules must fit, at its own argument size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Units of work (nodes evaluated and bytes touched).
    pub work: f64,
    /// Bytes allocated.
    pub alloc: f64,
}

impl Budget {
    /// The budget every call's rules share: about 100 ms of the
    /// interpreter's time and 32 MiB by the bound, which overstates what
    /// rules really take by about three times (`toolhost-bench --policy`
    /// measures both). A rule linear in its arguments fits it at the
    /// largest arguments a rule reads; one that is quadratic does not.
    pub const DEFAULT: Self = Self {
        work: 100_000_000.0,
        alloc: 32.0 * 1024.0 * 1024.0,
    };
}

/// Why a rule's cost cannot be bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unbounded(pub(crate) &'static str);

/// The cost of a rule's expression, including reading the arguments into
/// the interpreter.
pub(crate) fn of_rule(e: &IdedExpr) -> Result<Cost, Unbounded> {
    let mut walk = Walker::default();
    let body = walk.expr(e)?;
    // `args` is converted into the interpreter's values once per call:
    // a walk over the JSON, and a slot for every value in it.
    let read = Cost {
        size: Poly::ZERO,
        work: Poly::n(READ),
        alloc: Poly::n(READ_ALLOC),
    };
    let total = read.then(body);
    if total.work.unbounded || total.alloc.unbounded || total.work.x != 0.0 {
        return Err(Unbounded(
            "its cost grows faster than the fourth power of the arguments' size",
        ));
    }
    Ok(total)
}

#[derive(Default)]
struct Walker {
    /// Variables bound by the comprehension being walked: its element(s)
    /// and its accumulator.
    element: Vec<String>,
    accumulator: Option<String>,
}

impl Walker {
    fn expr(&mut self, e: &IdedExpr) -> Result<Cost, Unbounded> {
        match &e.expr {
            Expr::Literal(l) => Ok(Cost::leaf(Poly::constant(literal_size(l)))),
            Expr::Ident(name) => Ok(Cost::leaf(self.ident(name))),
            Expr::Select(s) => {
                let operand = self.expr(&s.operand)?;
                // A field lookup: the value is part of its operand.
                Ok(operand.then(Cost::leaf(operand.size)))
            }
            Expr::List(l) => {
                let mut cost = Cost::leaf(Poly::ZERO);
                let mut size = Poly::ZERO;
                for x in &l.elements {
                    let c = self.expr(x)?;
                    size = size.add(c.size).add(Poly::constant(1.0));
                    cost = cost.then(c);
                }
                cost.size = size;
                cost.alloc = cost
                    .alloc
                    .add(Poly::constant(SLOT * l.elements.len() as f64));
                Ok(cost)
            }
            Expr::Map(m) => self.entries(&m.entries),
            Expr::Struct(s) => self.entries(&s.entries),
            Expr::Call(c) => self.call(&c.func_name, c.target.as_deref(), &c.args),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Unspecified => Ok(Cost::leaf(Poly::ZERO)),
        }
    }

    fn ident(&self, name: &str) -> Poly {
        if self.element.iter().any(|v| v == name) {
            Poly::x()
        } else if self.accumulator.as_deref() == Some(name) {
            // A scalar accumulator (`all`, `exists`, `exists_one`); a list
            // one is only ever appended to, which `comprehension` prices.
            Poly::constant(SCALAR)
        } else if name == "args" {
            Poly::n(1.0)
        } else {
            Poly::constant(FACTS)
        }
    }

    fn entries(&mut self, entries: &[cel::common::ast::IdedEntryExpr]) -> Result<Cost, Unbounded> {
        let mut cost = Cost::leaf(Poly::ZERO);
        let mut size = Poly::ZERO;
        for entry in entries {
            let parts: Vec<&IdedExpr> = match &entry.expr {
                EntryExpr::StructField(f) => vec![&f.value],
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
            };
            for p in parts {
                let c = self.expr(p)?;
                size = size.add(c.size).add(Poly::constant(2.0));
                cost = cost.then(c);
            }
        }
        cost.size = size;
        cost.alloc = cost
            .alloc
            .add(Poly::constant(2.0 * SLOT * entries.len() as f64));
        Ok(cost)
    }

    /// A function or an operator. Operands are evaluated first; then the
    /// operation's own work and allocation, by what it does to them.
    fn call(
        &mut self,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Result<Cost, Unbounded> {
        let mut operands = Vec::with_capacity(args.len() + 1);
        let mut cost = Cost::leaf(Poly::ZERO);
        for a in target.into_iter().chain(args) {
            let c = self.expr(a)?;
            cost = cost.then(c);
            operands.push(c.size);
        }
        let all = operands.iter().fold(Poly::ZERO, |acc, s| acc.add(*s));
        let first = operands.first().copied().unwrap_or(Poly::ZERO);
        let (size, work, alloc) = match name {
            // Concatenation (strings, bytes, lists): both sides copied.
            operators::ADD => (all, all, all.add(Poly::constant(SLOT))),
            // Comparisons and membership: at worst every byte of both
            // sides looked at once (`in` over a list compares each element
            // with the needle, and the elements add up to the list).
            operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | operators::IN => (Poly::constant(SCALAR), all, Poly::ZERO),
            // An element of a list or a map: part of it.
            operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => {
                (first, all, Poly::ZERO)
            }
            // Either branch; both counted.
            operators::CONDITIONAL => {
                let branches = operands
                    .iter()
                    .skip(1)
                    .fold(Poly::ZERO, |acc, s| acc.add(*s));
                (branches, Poly::ZERO, Poly::ZERO)
            }
            // Scans of a string or a list (`size` counts a string's
            // characters; `contains` and its kin are linear searches;
            // `max`/`min` read every element).
            "size" | "contains" | "startsWith" | "endsWith" | "max" | "min" => {
                (Poly::constant(SCALAR), all, Poly::ZERO)
            }
            // Conversions: a string or bytes copied, a number parsed.
            "string" | "bytes" => (
                all.add(Poly::constant(SCALAR)),
                all,
                all.add(Poly::constant(SLOT)),
            ),
            "int" | "uint" | "double" | "bool" | "type" => {
                (Poly::constant(SCALAR), all, Poly::constant(SLOT))
            }
            "dyn" => (first, Poly::ZERO, Poly::ZERO),
            // Logic and arithmetic on scalars.
            _ => (Poly::constant(SCALAR), Poly::constant(1.0), Poly::ZERO),
        };
        cost.size = size;
        cost.work = cost.work.add(work).add(Poly::constant(NODE));
        cost.alloc = cost.alloc.add(alloc).add(Poly::constant(SLOT));
        Ok(cost)
    }

    /// `all`, `exists`, `exists_one` (a scalar accumulator) and `map`,
    /// `filter` (a list appended to in place). Anything else is refused:
    /// only these macros make comprehensions.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Cost, Unbounded> {
        if !self.element.is_empty() {
            return Err(Unbounded("a comprehension holds another"));
        }
        let range = self.expr(&c.iter_range)?;
        let init = self.expr(&c.accu_init)?;
        // The number of elements: each takes a byte and a separator.
        let elements = range.size.scale(0.5).add(Poly::constant(1.0));
        self.element.push(c.iter_var.clone());
        self.element.extend(c.iter_var2.clone());
        self.accumulator = Some(c.accu_var.clone());
        let body = match appended(c) {
            Some((guard, item)) => {
                let mut per = Cost::leaf(Poly::ZERO);
                if let Some(g) = guard {
                    per = per.then(self.expr(g)?);
                }
                let item = self.expr(item)?;
                per = per.then(item);
                // The result holds one slot per element and what it made.
                per.size = item.size.add(Poly::constant(1.0));
                per.work = per.work.add(Poly::constant(STEP));
                per.alloc = per.alloc.add(Poly::constant(SLOT + STEP_ALLOC));
                Ok(per)
            }
            None if is_scalar(c) => {
                let cond = self.expr(&c.loop_cond)?;
                let step = self.expr(&c.loop_step)?;
                let mut per = cond.then(step);
                per.size = Poly::ZERO;
                // A scope and the element, boxed anew for every step.
                per.work = per.work.add(Poly::constant(STEP));
                per.alloc = per.alloc.add(Poly::constant(STEP_ALLOC));
                Ok(per)
            }
            None => Err(Unbounded(
                "a comprehension of a shape toolhost cannot bound",
            )),
        };
        self.element.clear();
        self.accumulator = None;
        let body = body?;
        let result = self.expr(&c.result)?;
        let sum = |p: Poly| {
            if p.degree().is_none() {
                return Poly::UNBOUNDED;
            }
            elements.times(p.without_x()).add(range.size.scale(p.x))
        };
        let size = if appended(c).is_some() {
            sum(body.size)
        } else {
            Poly::constant(SCALAR)
        };
        Ok(Cost {
            size,
            work: range
                .work
                .add(init.work)
                .add(sum(body.work))
                .add(result.work),
            alloc: range.alloc.add(init.alloc).add(sum(body.alloc)),
        })
    }
}

/// A `map` or `filter` step, `@result + [item]` (guarded by `g ? … :
/// @result`): the guard and the item.
fn appended(c: &ComprehensionExpr) -> Option<(Option<&IdedExpr>, &IdedExpr)> {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    fn item_of<'e>(e: &'e IdedExpr, is_accu: &dyn Fn(&IdedExpr) -> bool) -> Option<&'e IdedExpr> {
        let Expr::Call(call) = &e.expr else {
            return None;
        };
        match (
            call.func_name.as_str(),
            call.target.as_ref(),
            call.args.as_slice(),
        ) {
            (operators::ADD, None, [lhs, rhs]) if is_accu(lhs) => match &rhs.expr {
                Expr::List(l) if l.elements.len() == 1 => l.elements.first(),
                _ => None,
            },
            _ => None,
        }
    }
    let starts_empty = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
    if !starts_empty || !is_accu(&c.result) {
        return None;
    }
    if let Expr::Call(call) = &c.loop_step.expr
        && call.func_name == operators::CONDITIONAL
        && let [guard, step, otherwise] = call.args.as_slice()
        && is_accu(otherwise)
    {
        return item_of(step, &is_accu).map(|item| (Some(guard), item));
    }
    item_of(&c.loop_step, &is_accu).map(|item| (None, item))
}

/// An `all`, `exists` or `exists_one`: the accumulator starts as a
/// boolean or a number literal.
fn is_scalar(c: &ComprehensionExpr) -> bool {
    use cel::common::ast::LiteralValue;
    matches!(
        &c.accu_init.expr,
        Expr::Literal(LiteralValue::Boolean(_) | LiteralValue::Int(_) | LiteralValue::UInt(_))
    )
}

fn literal_size(l: &cel::common::ast::LiteralValue) -> f64 {
    use cel::common::ast::LiteralValue;
    match l {
        LiteralValue::String(s) => s.inner().len() as f64 + 2.0,
        LiteralValue::Bytes(b) => b.inner().len() as f64 + 2.0,
        _ => SCALAR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(rule: &str) -> Cost {
        let p = cel::Program::compile(rule).expect("compiles");
        of_rule(p.expression()).expect("bounded")
    }

    #[test]
    fn a_rule_without_a_comprehension_is_linear() {
        let c = cost(r#"args.path.startsWith("/workspace/") && !args.path.contains("..")"#);
        assert_eq!(c.work.degree(), Some(1));
        let c = cost("args.a + args.b + args.c == args.d");
        assert_eq!(c.work.degree(), Some(1));
    }

    #[test]
    fn a_comprehension_over_the_arguments_is_linear_when_its_body_reads_only_the_element() {
        let c = cost("args.tags.all(t, size(t) < 8)");
        assert_eq!(c.work.degree(), Some(1), "{c:?}");
        let c = cost("args.tags.filter(t, t.startsWith('x')).size() > 0");
        assert_eq!(c.work.degree(), Some(1), "{c:?}");
    }

    #[test]
    fn a_body_that_copies_the_arguments_for_every_element_is_quadratic() {
        for rule in [
            "size(args.items.map(x, args.s + x)) >= 0",
            "args.items.all(x, size(args.s + x) > 0)",
            "args.items.exists(x, x in args.items)",
        ] {
            let c = cost(rule);
            assert_eq!(c.work.degree(), Some(2), "{rule}: {c:?}");
        }
    }

    #[test]
    fn at_the_largest_arguments_a_quadratic_rule_is_over_the_budget_and_a_linear_one_is_not() {
        let n = 64.0 * 1024.0;
        let hostile = cost("size(args.items.map(x, args.s + x)) >= 0");
        assert!(
            hostile.work.at(n) > Budget::DEFAULT.work
                || hostile.alloc.at(n) > Budget::DEFAULT.alloc
        );
        let honest = cost("args.tags.all(t, size(t) < 8)");
        assert!(
            honest.work.at(n) < Budget::DEFAULT.work,
            "{}",
            honest.work.at(n)
        );
        assert!(
            honest.alloc.at(n) < Budget::DEFAULT.alloc,
            "{}",
            honest.alloc.at(n)
        );
    }

    #[test]
    fn the_polynomial_arithmetic_is_exact_and_stops_past_its_degree() {
        let n = Poly::n(1.0);
        let sq = n.times(n);
        assert_eq!(sq.at(3.0), 9.0);
        assert_eq!(sq.times(sq).at(2.0), 16.0);
        assert!(sq.times(sq).times(n).unbounded);
        assert_eq!(
            Poly::x().at(5.0),
            f64::INFINITY,
            "an element's size must be summed away"
        );
    }
}
