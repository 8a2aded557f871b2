"""The text the demo's small GPT learns from: a few paragraphs written for torchtpu (no third-party text).

A Python string rather than a data file, so it travels with the package however it is installed.
"""

TEXT = """\
A tensor is a grid of numbers with a shape and a type. On the tpu device a tensor lives in the memory of the
chip, and every operation on it becomes a small program that the compiler turns into machine code once and
then runs again and again. The first step of a training loop is slow because every program is new; the
second step is fast because every program is already compiled. This is the whole trick of the device:
compile once, run many times.

A training step reads a batch of examples, runs the model forward, measures the loss, runs the model
backward to find the gradient of the loss with respect to every weight, and moves each weight a little way
downhill. The optimizer keeps two running averages for every weight, the mean of the gradient and the mean of
its square, and it divides the first by the root of the second so that every weight takes a step of a
sensible size. Then the loop begins again with the next batch.

A language model reads text one character at a time and guesses the next character. At first its guesses are
uniform noise and the loss is the logarithm of the size of the alphabet. After a few hundred steps it has
learned that a space follows a word, that a capital letter follows a full stop, and that the letters t and h
like each other. After a few thousand steps it writes words. After a few million it writes sentences that a
person might have written, and after a few billion it answers questions.

The chip does not know what a word is. It knows how to multiply large matrices very quickly, and it knows how
to add, compare and select numbers in long rows. Attention is a matrix product, a softmax and another matrix
product. A layer norm is two reductions and a few elementwise operations. Everything a transformer does is a
few dozen such programs, and the same few dozen run at every step.

When the shapes stay the same the programs stay the same. When a sequence grows by one token at every step of
generation the shapes change, and a naive device would compile a new program at every step. The tpu device
keeps spare room at the end of the cache so that most steps reuse a program, and it compiles again only when
the room runs out and doubles.

Mixed precision keeps the weights in thirty two bit floats and runs the matrix products in sixteen bit brain
floats, which have the range of the larger type and half of its size. The loss and the normalisations stay in
the larger type, where small differences matter. The result trains almost exactly like the full precision
run and moves half as many bytes.

The same program runs on a laptop, on a graphics card and on a pod of tensor processing units, because the
device speaks to the hardware only through a plugin with a small and stable interface. For development the
plugin is the central processing unit itself, pretending to be one chip or eight, so that every test and
every benchmark can run anywhere.
"""
